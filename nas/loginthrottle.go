package nas

// Throttling of the dashboard's login. Each client address (an IPv6 client
// by its /64) may get the operator token wrong a few times; after that each
// further failure locks the address out for twice as long as the one
// before, and every attempt during a lock, the right token included, is
// refused with 429 without the token being compared. A successful login
// forgets the address. Every address together also has a failure budget,
// so that a spread of addresses cannot guess quickly either. Refusals are
// logged in aggregate: one line per address per interval, with the counts
// since the line before.

import (
	"container/list"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits of the login throttle.
const (
	// LoginFailureBudget is how many wrong tokens in a row a client address
	// may send before it is locked out.
	LoginFailureBudget = 5
	// LoginLockoutBase is the first lockout; each further failure doubles it.
	LoginLockoutBase = time.Second
	// LoginLockoutMax caps a lockout.
	LoginLockoutMax = 15 * time.Minute
	// LoginForgetAfter is how long after its last failure an address starts
	// afresh.
	LoginForgetAfter = time.Hour
	// LoginLogInterval is the least time between two log lines about one
	// address (or about the global budget).
	LoginLogInterval = time.Minute
	// LoginGlobalBurst is how many wrong tokens every address together may
	// send at once; beyond it they may send LoginGlobalRate per second.
	LoginGlobalBurst = 100
	// LoginGlobalRate is the sustained rate of wrong tokens every address
	// together may send, per second.
	LoginGlobalRate = 1.0
	// loginMaxAddresses bounds the addresses remembered; beyond it the one
	// that failed least recently is forgotten.
	loginMaxAddresses = 10000
)

// loginThrottle counts the login failures of client addresses. It is safe
// for concurrent use.
type loginThrottle struct {
	log *slog.Logger
	now func() time.Time
	max int

	mu     sync.Mutex
	addrs  map[string]*list.Element // of *loginAddr
	order  *list.List               // least recently active first
	global *rate.Limiter
	// The global budget's refusals since its last log line.
	globalRefused  int
	globalLoggedAt time.Time
	// timer flushes the counts waiting to be logged; nil while none wait.
	timer *time.Timer
}

// loginAddr is what the throttle knows of one client address.
type loginAddr struct {
	key         string
	failures    int       // wrong tokens in a row
	lastFailure time.Time // of the latest wrong token
	lockedUntil time.Time
	active      time.Time // latest failure or refusal
	// The counts since the address's last log line, and when that was.
	loggedAt        time.Time
	unloggedFailed  int
	unloggedRefused int
}

// loginVerdict is what the throttle made of one attempt.
type loginVerdict struct {
	// Refused says the attempt was not considered: the address (or every
	// address together) is locked out for RetryAfter.
	Refused    bool
	RetryAfter time.Duration
}

// logLine is one aggregate log line, written after the lock is released.
type logLine struct {
	msg   string
	attrs []any
}

func newLoginThrottle(log *slog.Logger, now func() time.Time) *loginThrottle {
	return &loginThrottle{
		log:    log,
		now:    now,
		max:    loginMaxAddresses,
		addrs:  map[string]*list.Element{},
		order:  list.New(),
		global: rate.NewLimiter(rate.Limit(LoginGlobalRate), LoginGlobalBurst),
	}
}

// attempt records one login attempt from the address key at now, right
// saying whether its token was the operator token. A locked-out address,
// or any address while the global budget is spent, is refused whatever its
// token; otherwise a right token forgets the address and a wrong one is
// counted as a failure.
func (l *loginThrottle) attempt(key string, now time.Time, right bool) loginVerdict {
	var lines []logLine
	defer func() { l.write(lines) }()
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.armLocked()

	el, known := l.addrs[key]
	var a *loginAddr
	if known {
		a = el.Value.(*loginAddr)
		if now.Before(a.lockedUntil) {
			a.unloggedRefused++
			a.active = now
			l.order.MoveToBack(el)
			lines = l.due(lines, a, now)
			return loginVerdict{Refused: true, RetryAfter: a.lockedUntil.Sub(now)}
		}
	}
	if l.global.TokensAt(now) < 1 {
		r := l.global.ReserveN(now, 1)
		wait := r.DelayFrom(now)
		r.CancelAt(now)
		l.globalRefused++
		if now.Sub(l.globalLoggedAt) >= LoginLogInterval {
			lines = append(lines, l.globalLine())
			l.globalLoggedAt, l.globalRefused = now, 0
		}
		return loginVerdict{Refused: true, RetryAfter: max(wait, time.Second)}
	}
	if right {
		if known {
			if a.unloggedFailed+a.unloggedRefused > 0 {
				lines = append(lines, addrLine(a, "operator login from an address that failed before"))
			}
			l.order.Remove(el)
			delete(l.addrs, key)
		}
		return loginVerdict{}
	}

	l.global.AllowN(now, 1)
	if !known {
		lines = l.evict(lines)
		a = &loginAddr{key: key}
		el = l.order.PushBack(a)
		l.addrs[key] = el
	}
	if !a.lastFailure.IsZero() && now.Sub(a.lastFailure) >= LoginForgetAfter {
		a.failures = 0
	}
	a.failures++
	a.lastFailure, a.active = now, now
	a.unloggedFailed++
	if a.failures >= LoginFailureBudget {
		a.lockedUntil = now.Add(lockout(a.failures - LoginFailureBudget))
	}
	l.order.MoveToBack(el)
	lines = l.due(lines, a, now)
	return loginVerdict{}
}

// lockout is the lockout after the n-th failure beyond the budget (from 0).
func lockout(n int) time.Duration {
	if n >= 30 {
		return LoginLockoutMax
	}
	return min(LoginLockoutBase<<n, LoginLockoutMax)
}

// due appends a's line when it has counts and its last line is
// LoginLogInterval old (or it never had one).
func (l *loginThrottle) due(lines []logLine, a *loginAddr, now time.Time) []logLine {
	if a.unloggedFailed+a.unloggedRefused == 0 || (!a.loggedAt.IsZero() && now.Sub(a.loggedAt) < LoginLogInterval) {
		return lines
	}
	lines = append(lines, addrLine(a, "operator logins refused", "locked_for", max(a.lockedUntil.Sub(now), 0).String()))
	a.loggedAt, a.unloggedFailed, a.unloggedRefused = now, 0, 0
	return lines
}

// addrLine is a log line of a's counts since its last line.
func addrLine(a *loginAddr, msg string, attrs ...any) logLine {
	return logLine{msg: msg, attrs: append([]any{
		"client", a.key, "wrong_tokens", a.unloggedFailed, "throttled", a.unloggedRefused, "failures_in_a_row", a.failures,
	}, attrs...)}
}

// globalLine is the log line of the global budget's refusals.
func (l *loginThrottle) globalLine() logLine {
	return logLine{msg: "operator logins refused: too many wrong tokens from every address together",
		attrs: []any{"throttled", l.globalRefused}}
}

// evict makes room for one more address by forgetting the least recently
// active ones (stale addresses are among them, flush forgets those anyway).
func (l *loginThrottle) evict(lines []logLine) []logLine {
	for el := l.order.Front(); el != nil && len(l.addrs) >= l.max; el = l.order.Front() {
		lines = l.forget(lines, el.Value.(*loginAddr))
	}
	return lines
}

// forget drops a, logging the counts it has not logged yet.
func (l *loginThrottle) forget(lines []logLine, a *loginAddr) []logLine {
	if a.unloggedFailed+a.unloggedRefused > 0 {
		lines = append(lines, addrLine(a, "operator logins refused"))
	}
	l.order.Remove(l.addrs[a.key])
	delete(l.addrs, a.key)
	return lines
}

// flush logs the counts that waited LoginLogInterval since their address's
// last line, and forgets the addresses whose last failure is
// LoginForgetAfter old and whose lock is over.
func (l *loginThrottle) flush(now time.Time) {
	var lines []logLine
	defer func() { l.write(lines) }()
	l.mu.Lock()
	defer l.mu.Unlock()
	for el := l.order.Front(); el != nil; {
		next := el.Next()
		a := el.Value.(*loginAddr)
		if now.Sub(a.active) >= LoginForgetAfter && !now.Before(a.lockedUntil) {
			lines = l.forget(lines, a)
		} else {
			lines = l.due(lines, a, now)
		}
		el = next
	}
	if l.globalRefused > 0 && now.Sub(l.globalLoggedAt) >= LoginLogInterval {
		lines = append(lines, l.globalLine())
		l.globalLoggedAt, l.globalRefused = now, 0
	}
}

// armLocked makes sure a flush comes LoginLogInterval from now while some
// counts wait to be logged; l.mu is held. No goroutine runs while nothing
// waits.
func (l *loginThrottle) armLocked() {
	if l.timer != nil || !l.pendingLocked() {
		return
	}
	l.timer = time.AfterFunc(LoginLogInterval, func() {
		l.flush(l.now())
		l.mu.Lock()
		defer l.mu.Unlock()
		l.timer = nil
		l.armLocked()
	})
}

// pendingLocked reports whether some counts wait to be logged; l.mu is held.
func (l *loginThrottle) pendingLocked() bool {
	if l.globalRefused > 0 {
		return true
	}
	for _, el := range l.addrs {
		if a := el.Value.(*loginAddr); a.unloggedFailed+a.unloggedRefused > 0 {
			return true
		}
	}
	return false
}

// write logs lines at WARN.
func (l *loginThrottle) write(lines []logLine) {
	for _, ln := range lines {
		l.log.Warn(ln.msg, ln.attrs...)
	}
}

// loginClient is the throttle's key for a request's peer address
// (host:port, as net/http gives it): the IP, or for IPv6 its /64, which one
// client usually holds whole. An address that does not parse is its own key.
func loginClient(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, err := ip.WithZone("").Prefix(64)
		if err == nil {
			return p.String()
		}
	}
	return ip.String()
}
