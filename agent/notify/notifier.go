package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Clock is the time source of a Notifier.
type Clock interface {
	Now() time.Time
	// After fires once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Defaults of a Notifier's options.
const (
	DefaultLease      = 2 * time.Minute
	DefaultBackoff    = 5 * time.Second
	DefaultMaxBackoff = 10 * time.Minute
	DefaultGiveUp     = 24 * time.Hour
	DefaultPoll       = 30 * time.Second
)

// Options configures a Notifier.
type Options struct {
	// Owner names this notifier in claims (unique per process).
	Owner string
	// Lease is how long a claim holds; one send is cut off before it ends
	// (default DefaultLease).
	Lease time.Duration
	// Backoff is the first retry delay, doubled per attempt up to
	// MaxBackoff, with jitter.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// GiveUp bounds how long after CreatedAt (or a replay) a notification is retried
	// before it goes dead.
	GiveUp time.Duration
	// Poll is how often Run looks at the outbox when nothing is due sooner.
	Poll time.Duration
	// Clock is the time source (default: the system clock).
	Clock Clock
	// Log receives sent, retried and dead notifications.
	Log *slog.Logger
	// Observe, if set, is told every recorded attempt (ledger lines for
	// sent and dead notifications, metrics).
	Observe func(Row, Attempt)
}

// Notifier drains an Outbox: it claims each due notification, sends it,
// and records the attempt. Any number of Notifiers may drain one outbox;
// the claim keeps one id from being sent twice at once.
type Notifier struct {
	box  Outbox
	send Sender
	opts Options
	wake chan struct{}
}

// New returns a Notifier draining box through send.
func New(box Outbox, send Sender, opts Options) *Notifier {
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.MaxBackoff < opts.Backoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.Backoff)
	}
	if opts.GiveUp <= 0 {
		opts.GiveUp = DefaultGiveUp
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Owner == "" {
		opts.Owner = fmt.Sprintf("notifier-%x", rand.Uint64())
	}
	return &Notifier{box: box, send: send, opts: opts, wake: make(chan struct{}, 1)}
}

// Wake makes Run look at the outbox now (after a new row was written).
func (n *Notifier) Wake() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Run drains the outbox until ctx ends: at once (resuming whatever a
// previous process left open), then whenever woken, a row falls due, or
// the poll interval passes.
func (n *Notifier) Run(ctx context.Context) error {
	for {
		next, err := n.Drain(ctx)
		if err != nil && ctx.Err() == nil {
			n.opts.Log.Warn("notify: drain", "err", err)
		}
		wait := n.opts.Poll
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(n.opts.Clock.Now()), 10*time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-n.wake:
		case <-n.opts.Clock.After(wait):
		}
	}
}

// Drain makes one pass: every row due now is claimed and sent. It returns
// when the earliest remaining open row falls due (zero if none).
func (n *Notifier) Drain(ctx context.Context) (time.Time, error) {
	rows, err := n.box.Pending(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("notify: pending: %w", err)
	}
	var next time.Time
	var errs []error
	for _, r := range rows {
		if err := ctx.Err(); err != nil {
			return next, err
		}
		if !r.Due(n.opts.Clock.Now()) {
			next = earliest(next, dueAt(r))
			continue
		}
		again, err := n.deliver(ctx, r.ID)
		if err != nil {
			errs = append(errs, err)
		}
		next = earliest(next, again)
	}
	return next, errors.Join(errs...)
}

// deliver claims, sends and records one notification. It returns when it
// is due again (zero if finished or held by another sender).
func (n *Notifier) deliver(ctx context.Context, id string) (time.Time, error) {
	claim, err := n.box.Claim(ctx, id, n.opts.Owner, n.opts.Lease)
	switch {
	case errors.Is(err, ErrClaimed), errors.Is(err, ErrFinished), errors.Is(err, ErrNotDue), errors.Is(err, ErrNotFound):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("notify: claim %s: %w", id, err)
	}
	// The send must end before the lease does, or another sender could
	// take the row while this one is still talking to the target.
	left := claim.LeaseUntil.Sub(n.opts.Clock.Now()) - n.opts.Lease/10
	sendCtx, cancel := context.WithTimeout(ctx, left)
	res := n.send.Send(sendCtx, claim.Notification)
	cancel()
	a := n.judge(claim, res)
	if err := n.box.Done(ctx, claim, a); err != nil {
		return time.Time{}, fmt.Errorf("notify: record %s: %w", id, err)
	}
	n.log(claim, a)
	if n.opts.Observe != nil {
		n.opts.Observe(claim, a)
	}
	if a.State == StatePending {
		return a.NextAt, nil
	}
	return time.Time{}, nil
}

// judge turns a send result into the attempt to record: a retry becomes
// dead once the next try would fall after the give-up time.
func (n *Notifier) judge(claim Row, res Result) Attempt {
	now := n.opts.Clock.Now()
	a := Attempt{At: now, Status: res.Status, Error: res.Error}
	switch res.Outcome {
	case OutcomeSent:
		a.State = StateSent
		return a
	case OutcomeRetry:
		wait := max(n.backoff(claim.Attempts+1), res.RetryAfter)
		a.NextAt = now.Add(wait)
		if !a.NextAt.Before(claim.start().Add(n.opts.GiveUp)) {
			a.State = StateDead
			a.NextAt = time.Time{}
			a.Error = fmt.Sprintf("gave up after %d attempts: %s", claim.Attempts+1, res.Error)
			return a
		}
		a.State = StatePending
		return a
	default:
		a.State = StateDead
		return a
	}
}

// backoff returns the delay before attempt k+1 (k >= 1): Backoff*2^(k-1)
// capped at MaxBackoff, with equal jitter (half fixed, half random).
func (n *Notifier) backoff(k int) time.Duration {
	d := n.opts.Backoff
	for i := 1; i < k && d < n.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, n.opts.MaxBackoff)
	half := d / 2
	return half + rand.N(half+1)
}

func (n *Notifier) log(r Row, a Attempt) {
	attrs := []any{"id", r.ID, "job", r.Body.JobID, "run", r.Body.RunID, "event", r.Body.Event,
		"target", r.Target.Kind, "attempt", r.Attempts + 1}
	switch a.State {
	case StateSent:
		n.opts.Log.Info("notification sent", attrs...)
	case StateDead:
		n.opts.Log.Error("notification dead", append(attrs, "status", a.Status, "err", a.Error)...)
	default:
		n.opts.Log.Warn("notification will be retried", append(attrs, "status", a.Status, "err", a.Error, "next", a.NextAt)...)
	}
}

func dueAt(r Row) time.Time {
	if r.State == StateSending {
		return r.LeaseUntil
	}
	return r.NextAt
}

func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
