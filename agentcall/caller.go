// Package agentcall is the outbound call to agents: the callback address
// policy (which hosts a callback may name and which addresses it may reach),
// an SSRF-safe client that POSTs a fire or a reconcile request, and the one
// reading of what an agent's answer means (ClassifyAnswer). NAS uses it for
// NAS-mediated fires and its reconcile nudges; a dispatcher delivering direct
// fires (in NAS or in a chronos relay process) uses it the same way, so both
// deliveries of a fire end alike.
package agentcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// ErrAddressNotAllowed is returned (wrapped) when a callback resolves to an
// address the SSRF policy refuses.
var ErrAddressNotAllowed = errors.New("callback address not allowed")

// metadataAddrs are cloud metadata endpoints: refused even when private
// callbacks are allowed (only an explicit allowlist entry lets them through).
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// specialPrefixes are ranges that are never public even though the netip
// predicates do not name them.
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 can reach private IPv4
	netip.MustParsePrefix("2001:db8::/32"),
}

// Policy decides which addresses agent callbacks may reach.
type Policy struct {
	// AllowPrivate lets loopback, private and link-local addresses through
	// (development only); metadata, unspecified and multicast stay refused.
	AllowPrivate bool
	// Allow lists prefixes and host names that are always allowed.
	Allow Allowlist
}

// Allowlist is the parsed callback_allowlist: address prefixes and host names.
type Allowlist struct {
	Prefixes []netip.Prefix
	Hosts    []string
}

// ParseAllowlist parses callback_allowlist entries: a CIDR, a single IP, or a
// host name.
func ParseAllowlist(entries []string) (Allowlist, error) {
	var a Allowlist
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			a.Prefixes = append(a.Prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			a.Prefixes = append(a.Prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if strings.ContainsAny(e, "/: ") {
			return Allowlist{}, fmt.Errorf("entry %q is neither a CIDR, an IP nor a host name", e)
		}
		a.Hosts = append(a.Hosts, strings.ToLower(strings.TrimSuffix(e, ".")))
	}
	return a, nil
}

// AllowedAddr reports whether ip may be dialled.
func (p Policy) AllowedAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, pre := range p.Allow.Prefixes {
		if pre.Contains(ip) {
			return true
		}
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return false
		}
	}
	if ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	private := ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast()
	for _, pre := range specialPrefixes {
		if pre.Contains(ip) {
			private = true
		}
	}
	return !private || p.AllowPrivate
}

// AllowedHost reports whether a host name is explicitly allowlisted.
func (p Policy) AllowedHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.Allow.Hosts {
		if h == host {
			return true
		}
	}
	return false
}

// CheckCallbackURL validates an agent_callback_url at provision time: an
// absolute http(s) URL without user info, query or fragment, whose host (if
// it is a literal address or localhost) the policy allows. Names are checked
// again after DNS resolution at dial time. It returns the normalised base URL.
func (p Policy) CheckCallbackURL(raw string) (string, *contract.Error) {
	bad := func(format string, args ...any) (string, *contract.Error) {
		return "", contract.BadRequest(contract.CodeInvalidCallbackURL, format, args...)
	}
	if raw == "" {
		return bad("agent_callback_url is required")
	}
	if len(raw) > 2048 {
		return bad("agent_callback_url is longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("agent_callback_url is not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("agent_callback_url must be an absolute http or https URL")
	case u.Host == "" || u.Opaque != "":
		return bad("agent_callback_url has no host")
	case u.User != nil:
		return bad("agent_callback_url must not contain user info")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("agent_callback_url must not contain a fragment")
	case u.RawQuery != "" || u.ForceQuery:
		return bad("agent_callback_url must not contain a query")
	}
	host := u.Hostname()
	if p.AllowedHost(host) {
		return raw, nil
	}
	notAllowed := contract.Errorf(422, contract.CodeInvalidCallbackURL, "agent_callback_url host %q is not a public address", host)
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if !p.AllowedAddr(ip) {
			return "", notAllowed
		}
	} else if lh := strings.ToLower(strings.TrimSuffix(host, ".")); lh == "localhost" || strings.HasSuffix(lh, ".localhost") {
		if !p.AllowedAddr(netip.MustParseAddr("127.0.0.1")) {
			return "", notAllowed
		}
	}
	return raw, nil
}

// FireURL returns the URL a fire is POSTed to: the callback base URL with
// /api/cron/fire appended, unless it already ends with it.
func FireURL(callback string) string {
	base := strings.TrimRight(callback, "/")
	if strings.HasSuffix(base, contract.PathFire) {
		return base
	}
	return base + contract.PathFire
}

// Outcome kinds of a fire call.
const (
	// OutcomeDelivered: the agent took the fire (2xx, also duplicate/gone).
	OutcomeDelivered = "delivered"
	// OutcomeRejected: the agent refused it for good (400, 404, 410, 422,
	// any other 4xx but 401, 403, 408, 425 and 429; a redirect) or the
	// callback address is not allowed; the fire is dead-lettered at once.
	OutcomeRejected = "rejected"
	// OutcomeRetry: the agent could not take it now (5xx, 408, 425, 429, no
	// answer); the relay retries, honouring Retry-After.
	OutcomeRetry = "retry"
	// OutcomeRefused: the agent refused the fire token (401, 403). A key-set
	// race on the agent heals within a few retries, so the relay retries on
	// its ladder; once relay.retry.max_auth_attempts attempts were refused
	// the fire is dead-lettered (see FireResult.AtAttempt).
	OutcomeRefused = "refused"
)

// FireResult is what an agent's answer means for the relay.
type FireResult struct {
	Outcome     string
	HTTPStatus  int    // 0 when no answer was received
	AgentStatus string // the agent's `status`, when it sent one
	RunID       string // the agent's `run_id`, when it sent one
	// AgentError is the agent's `error` code, when it sent a plausible one.
	AgentError string
	Reason     string
	// ColdStart is true for connection refused or 503: the agent is waking.
	ColdStart  bool
	RetryAfter time.Duration
}

// AtAttempt settles a refused answer for the attempt-th delivery of a fire:
// below maxAuthAttempts it is retried, at or past it rejected with a reason
// that names the status, the agent's error code and the attempts. Other
// outcomes are returned as they are.
func (r FireResult) AtAttempt(attempt, maxAuthAttempts int) FireResult {
	return r.AtAttemptHint(attempt, maxAuthAttempts, "check its expected_audience, issuer and nas_jwks_url")
}

// AtAttemptHint is AtAttempt with the advice the final reason ends with
// (what to check on the agent for this kind of token).
func (r FireResult) AtAttemptHint(attempt, maxAuthAttempts int, hint string) FireResult {
	if r.Outcome != OutcomeRefused {
		return r
	}
	if attempt < maxAuthAttempts {
		r.Outcome = OutcomeRetry
		r.Reason = fmt.Sprintf("%s (the fire token was refused; attempt %d of at most %d)", r.Reason, attempt, maxAuthAttempts)
		return r
	}
	r.Outcome = OutcomeRejected
	r.Reason = fmt.Sprintf("%s: the agent refused the fire token %d times (relay.retry.max_auth_attempts); %s", r.Reason, attempt, hint)
	return r
}

// AgentDown reports whether a retried fire found its agent not answering
// (the relay's "agent down": it holds the agent's fires and probes it): no
// answer at all (connection refused, timeout, unreachable, a callback host
// that does not resolve), or an answer that says the agent cannot take fires
// now (503 waking or overloaded, 408, 425, 429). NAS's relay route answers
// those 503 agent_unavailable; an agent that answered another 5xx, or
// refused the fire token, is up: 502.
func (r FireResult) AgentDown() bool {
	switch r.HTTPStatus {
	case 0, http.StatusServiceUnavailable, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return r.ColdStart
}

// Caller POSTs fires to agents with an SSRF-safe client: no proxy, no
// redirects, a dial timeout and a whole-call timeout, a capped response read,
// and a dialer that refuses addresses the policy does not allow after DNS
// resolution.
type Caller struct {
	client  *http.Client
	timeout time.Duration
}

// maxAgentResponse caps how much of an agent's answer is read.
const maxAgentResponse = 64 << 10

// DefaultTimeout bounds a whole call to an agent when NewCaller is given
// none (NAS's delivery_timeout default).
const DefaultTimeout = 30 * time.Second

// NewCaller returns a caller bound to policy with a whole-call timeout
// (<= 0: DefaultTimeout).
func NewCaller(policy Policy, timeout time.Duration) *Caller {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	control := func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrAddressNotAllowed, address)
		}
		if !policy.AllowedAddr(ap.Addr()) {
			return fmt.Errorf("%w: %s", ErrAddressNotAllowed, ap.Addr())
		}
		return nil
	}
	guarded := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: control}
	open := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy: nil, // a proxy would bypass the dial-time guard
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			if policy.AllowedHost(host) {
				return open.DialContext(ctx, network, addr)
			}
			return guarded.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2: true,
		// An answer is a few dozen bytes of JSON, read at most 64 KiB:
		// asking for gzip would only cost a header map per call.
		DisableCompression: true,
		// Relay dispatchers deliver many fires at once, often to agents
		// behind one host: keep enough idle connections per host that a
		// burst reuses them instead of opening (and TIME_WAITing) new ones.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 64,
		// Below the agent's own idle timeout (60 s), so that NAS drops
		// an idle connection before the agent does.
		IdleConnTimeout:       45 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &Caller{
		timeout: timeout,
		client: &http.Client{
			Transport: transport,
			Timeout:   timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
}

// CloseIdle closes idle connections.
func (c *Caller) CloseIdle() { c.client.CloseIdleConnections() }

// Fire POSTs body to fireURL with the bearer token and maps the answer.
func (c *Caller) Fire(ctx context.Context, fireURL, token string, body []byte) FireResult {
	return c.Post(ctx, fireURL, token, body)
}

// Request header values every call to an agent carries, shared: the
// transport only reads a request's headers.
var (
	jsonContentType = []string{contract.MediaTypeJSON}
	nasUserAgent    = []string{"chronos-nas"}
)

// Post is one guarded call to an agent (a fire or a reconcile request):
// the bearer token, a JSON body, the call's timeout, a capped read of the
// answer, and the answer classified by ClassifyAnswer.
func (c *Caller) Post(ctx context.Context, target, token string, body []byte) FireResult {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return FireResult{Outcome: OutcomeRejected, Reason: "invalid callback URL"}
	}
	// The keys are canonical already: set without Header.Set's
	// canonicalisation and a slice per value.
	req.Header[contract.HeaderContentType] = jsonContentType
	req.Header[contract.HeaderAuthorization] = []string{contract.BearerPrefix + token}
	req.Header["User-Agent"] = nasUserAgent
	// A fire (or a reconcile request) is safe to send twice: the agent
	// claims by slot. Marked idempotent (the empty key is not sent), the
	// request is sent again on a new connection when a kept-alive one turns
	// out closed by the agent as it was reused, instead of failing the
	// delivery: an agent's idle timeout can end a connection at any time.
	req.Header["Idempotency-Key"] = nil
	// The client follows no redirect and ctx carries the whole call's
	// deadline, so its transport alone does what Client.Do would, without
	// the client's per-call timer and bookkeeping (every fire comes here).
	resp, err := c.client.Transport.RoundTrip(req)
	if err != nil {
		return classifyDialError(err)
	}
	defer resp.Body.Close()
	buf := answerBuffers.Get().(*[]byte)
	data := readAnswer(resp.Body, (*buf)[:0])
	res := ClassifyAnswer(resp.StatusCode, resp.Header.Get(contract.HeaderRetryAfter), data)
	if cap(data) <= answerBufferCap {
		*buf = data[:0]
		answerBuffers.Put(buf)
	}
	return res
}

// callContext returns ctx bounded by the call's timeout. A ctx that ends
// no later already bounds the call: it is used as it is, without a timer of
// its own.
func (c *Caller) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= c.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// answerBufferCap is the size of the pooled buffers answers are read into:
// an agent's answer is a few dozen bytes. A buffer that grew past it for a
// large answer is left to the garbage collector.
const answerBufferCap = 512

// answerBuffers pools the buffers agents' answers are read into
// (ClassifyAnswer keeps no reference to them).
var answerBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, answerBufferCap)
	return &b
}}

// readAnswer appends what r yields to b until EOF or an error, at most
// maxAgentResponse bytes in all, as io.ReadAll of an io.LimitReader would.
func readAnswer(r io.Reader, b []byte) []byte {
	for len(b) < maxAgentResponse {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(max(cap(b), answerBufferCap), maxAgentResponse-len(b)))
		}
		n, err := r.Read(b[len(b):min(cap(b), maxAgentResponse)])
		b = b[:len(b)+n]
		if err != nil {
			break
		}
	}
	return b
}

// classifyDialError maps a failed call (no answer from the agent) to a
// FireResult: an address the guard refused is final, anything else retries.
func classifyDialError(err error) FireResult {
	switch {
	case errors.Is(err, ErrAddressNotAllowed):
		return FireResult{Outcome: OutcomeRejected, Reason: "callback address not allowed"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return FireResult{Outcome: OutcomeRetry, ColdStart: true, Reason: "connection refused"}
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return FireResult{Outcome: OutcomeRetry, Reason: "agent timed out"}
	default:
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return FireResult{Outcome: OutcomeRetry, Reason: "callback host does not resolve"}
		}
		return FireResult{Outcome: OutcomeRetry, Reason: "agent unreachable: " + networkError(err)}
	}
}

// networkError is the network error under a failed call, without the URL
// the client wraps it in, cut to 200 bytes: for the reason that is logged.
func networkError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ClassifyAnswer is the one place that says what an agent's answer to a fire
// means (docs/operations.md has it as a table):
//
//	2xx                                   delivered (duplicate and gone too)
//	401, 403                              refused: retried on the ladder for at most
//	                                      relay.retry.max_auth_attempts attempts, then dead letter
//	503                                   retry, cold start (the agent is waking); agent down
//	408, 425, 429                         retry, honouring Retry-After; agent down
//	other 5xx                             retry, honouring Retry-After
//	3xx                                   rejected: redirects are not followed
//	400, 404, 410, 422, other 4xx, 1xx    rejected: dead letter at once
//
// A call that got no answer is classified by the caller: connection errors,
// timeouts and names that do not resolve retry (agent down), an address the
// SSRF guard refused is rejected. "Agent down" retries are answered 503
// agent_unavailable on the relay route (the relay holds the agent's fires
// and probes it, see relay.Queue.Down); the other retries 502.
func ClassifyAnswer(status int, retryAfter string, body []byte) FireResult {
	r := FireResult{HTTPStatus: status, RetryAfter: parseRetryAfter(retryAfter)}
	if status >= 200 && status < 300 {
		r.Outcome = OutcomeDelivered
		r.AgentStatus, r.RunID = fireAnswerFields(body)
		return r
	}
	answered := "agent answered " + strconv.Itoa(status)
	if r.AgentError = errorCode(body); r.AgentError != "" {
		answered += " " + r.AgentError
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		r.Outcome, r.Reason = OutcomeRefused, answered
	case status == http.StatusServiceUnavailable:
		r.Outcome, r.ColdStart, r.Reason = OutcomeRetry, true, answered
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		r.Outcome, r.Reason = OutcomeRetry, answered
	case status >= 300 && status < 400:
		r.Outcome, r.Reason = OutcomeRejected, "agent answered a redirect ("+strconv.Itoa(status)+"); redirects are not followed"
	default:
		r.Outcome, r.Reason = OutcomeRejected, answered
	}
	return r
}

// Limits on what of a delivered answer's `status` and `run_id` is kept.
const (
	maxAgentStatus = 64
	maxRunID       = 128
)

// fireAnswerFields returns the `status` and `run_id` of an agent's answer
// to a fire, truncated to maxAgentStatus and maxRunID bytes, as
// json.Unmarshal into a struct of the two reads them: empty when absent, not
// strings, or the body is not JSON. The common shape (see scanFireAnswer) is
// read without encoding/json and without copying a known status.
func fireAnswerFields(body []byte) (status, runID string) {
	if st, run, ok := scanFireAnswer(body); ok {
		return knownStatus(st[:min(len(st), maxAgentStatus)]), string(run[:min(len(run), maxRunID)])
	}
	var fr struct {
		Status string `json:"status"`
		RunID  string `json:"run_id"`
	}
	_ = json.Unmarshal(body, &fr)
	return truncate(fr.Status, maxAgentStatus), truncate(fr.RunID, maxRunID)
}

// knownStatus returns b as a string, the constant itself for the fire
// statuses agents answer.
func knownStatus(b []byte) string {
	for _, s := range [...]string{contract.FireAccepted, contract.FireDuplicate, contract.FireGone, contract.FireRefreshed} {
		if string(b) == s {
			return s
		}
	}
	return string(b)
}

// scanFireAnswer reads a body of the shape agents answer a fire with: one
// JSON object, white space around its tokens, whose keys and values are all
// strings of printable ASCII without escapes. It returns the last `status`
// and `run_id` values (keys matched case-insensitively), exactly what
// json.Unmarshal stores for them; ok is false for any other body (which
// then goes to encoding/json).
func scanFireAnswer(b []byte) (status, runID []byte, ok bool) {
	i := skipJSONSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, nil, false
	}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, nil, skipJSONSpace(b, i+1) == len(b)
	}
	for {
		key, j, okKey := plainJSONString(b, i)
		if !okKey {
			return nil, nil, false
		}
		i = skipJSONSpace(b, j)
		if i == len(b) || b[i] != ':' {
			return nil, nil, false
		}
		val, j, okVal := plainJSONString(b, skipJSONSpace(b, i+1))
		if !okVal {
			return nil, nil, false
		}
		switch {
		case strings.EqualFold(string(key), "status"):
			status = val
		case strings.EqualFold(string(key), "run_id"):
			runID = val
		}
		i = skipJSONSpace(b, j)
		switch {
		case i == len(b):
			return nil, nil, false
		case b[i] == ',':
			i = skipJSONSpace(b, i+1)
		case b[i] == '}':
			return status, runID, skipJSONSpace(b, i+1) == len(b)
		default:
			return nil, nil, false
		}
	}
}

// skipJSONSpace returns the index of the first byte at or after i that is
// not JSON white space.
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainJSONString reads the JSON string at b[i] when it holds only
// printable ASCII and no escapes: its contents and the index after its
// closing quote.
func plainJSONString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// errorCode returns the `error` of an OAuth-style error body when it looks
// like a code (letters, digits, '_', '-', '.', at most 64 bytes): it goes
// into logs and the dead letter, so anything else is left out.
func errorCode(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error == "" || len(e.Error) > 64 {
		return ""
	}
	for _, c := range e.Error {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return ""
		}
	}
	return e.Error
}

// parseRetryAfter reads delta-seconds or an HTTP date; at most one hour.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	if d < 0 {
		d = 0
	}
	return min(d, time.Hour)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
