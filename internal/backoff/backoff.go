// Package backoff is the one retry schedule of Chronos: exponential steps
// with a cap, drawn with jitter from a random source the caller may pin, a
// wait that ends with its context, and a retry loop that honours a server's
// Retry-After. Every retry loop of the product (the relay's delivery ladder,
// its dispatchers' store errors, the agent's calls to NAS, its key-set load
// and its reconciles) takes its delays from here.
//
// The schedule is a pure function of the attempt number: the relay keeps a
// fire's attempt count in its store, and any process may compute the next
// delay of any fire from it.
package backoff

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Jitter says how a step's delay is drawn below its ceiling.
type Jitter int

const (
	// NoJitter waits the ceiling itself.
	NoJitter Jitter = iota
	// JitterAboveBase draws uniformly from [Base, ceiling]: a crowd that
	// failed together spreads over the whole step, and no wait is shorter
	// than Base.
	JitterAboveBase
	// JitterUpperHalf draws uniformly from the upper half of the ceiling,
	// [ceiling/2, ceiling]: spread out, yet at least half the step.
	JitterUpperHalf
)

// Policy is an exponential schedule: the ceiling of step n (1 for the delay
// after the first failure) is min(Max, Base·2^(n−1)), and the delay is drawn
// below it as Jitter says.
type Policy struct {
	// Base is the ceiling of the first step; it must be positive.
	Base time.Duration
	// Max caps every step's ceiling; a Max below Base is taken as Base.
	Max time.Duration
	// Jitter is how a delay is drawn below its ceiling.
	Jitter Jitter
	// Rand returns a uniform number in [0, n) for n > 0. Default
	// math/rand/v2.Int64N.
	Rand func(n int64) int64
}

// Ceiling returns the ceiling of step n (steps below 1 count as 1).
func (p Policy) Ceiling(n int) time.Duration {
	limit := max(p.Max, p.Base)
	c := p.Base
	for i := 1; i < n && c < limit; i++ {
		if c > limit/2 {
			return limit // doubling would pass the cap (or overflow)
		}
		c *= 2
	}
	return min(c, limit)
}

// Delay returns the delay of step n, drawn below its ceiling.
func (p Policy) Delay(n int) time.Duration {
	c := p.Ceiling(n)
	switch p.Jitter {
	case JitterAboveBase:
		return Between(min(p.Base, c), c, p.Rand)
	case JitterUpperHalf:
		half := c / 2
		return Between(half, 2*half, p.Rand)
	default:
		return c
	}
}

// Between returns a uniform duration in [lo, hi] drawn with rnd (a uniform
// number in [0, n); nil takes math/rand/v2.Int64N); lo when hi <= lo.
func Between(lo, hi time.Duration, rnd func(n int64) int64) time.Duration {
	if hi <= lo {
		return lo
	}
	if rnd == nil {
		rnd = rand.Int64N
	}
	return lo + time.Duration(rnd(int64(hi-lo)+1))
}

// Sleep waits d, or until ctx ends, and returns ctx's error in that case.
// A d of zero or less returns at once (with ctx's error, if it has ended).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Retrier calls an operation until it succeeds, its error says not to retry,
// the attempts are spent, or the context ends, waiting between attempts on
// Policy.
type Retrier struct {
	// Policy schedules the waits: the wait after the n-th failed attempt is
	// Policy.Delay(n).
	Policy Policy
	// MaxAttempts bounds the calls; 0 calls until success or the context
	// ends.
	MaxAttempts int
	// MaxWait is the longest wait a Retry-After may ask for (see After); a
	// longer one ends the retries with the attempt's error. 0 sets no bound.
	MaxWait time.Duration
	// OnRetry, when set, is told of each wait before it starts.
	OnRetry func(attempt int, wait time.Duration, err error)
}

// Do calls op with the attempt number (1 for the first) until it returns
// nil, and returns nil then. It returns op's error unwrapped from Permanent
// or After when the error is Permanent, the attempts are spent, a Retry-After
// exceeds MaxWait, or ctx's deadline comes before the next attempt could
// start (waiting it out would only end in ctx's error). When ctx ends during
// a wait, it returns a *StoppedError.
func (r Retrier) Do(ctx context.Context, op func(ctx context.Context, attempt int) error) error {
	for attempt := 1; ; attempt++ {
		err := op(ctx, attempt)
		if err == nil {
			return nil
		}
		var c *control
		wait := time.Duration(0)
		if errors.As(err, &c) {
			err = c.err
			if c.permanent {
				return err
			}
			wait = c.after
		}
		if r.MaxAttempts > 0 && attempt >= r.MaxAttempts {
			return err
		}
		if wait <= 0 {
			wait = r.Policy.Delay(attempt)
		} else if r.MaxWait > 0 && wait > r.MaxWait {
			return err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return err
		}
		if r.OnRetry != nil {
			r.OnRetry(attempt, wait, err)
		}
		if serr := Sleep(ctx, wait); serr != nil {
			return &StoppedError{Cause: serr, Last: err}
		}
	}
}

// StoppedError is Do's error when its context ended while it waited for
// the next attempt. It unwraps to both errors.
type StoppedError struct {
	// Cause is the context's error.
	Cause error
	// Last is the last attempt's error.
	Last error
}

// Error implements error.
func (e *StoppedError) Error() string {
	return fmt.Sprintf("%v (last error: %v)", e.Cause, e.Last)
}

// Unwrap returns the context's error and the last attempt's.
func (e *StoppedError) Unwrap() []error { return []error{e.Cause, e.Last} }

// control is an error that tells Do how to go on.
type control struct {
	err       error
	permanent bool
	after     time.Duration
}

func (c *control) Error() string { return c.err.Error() }
func (c *control) Unwrap() error { return c.err }

// Permanent marks err as not worth retrying: Do returns err at once. A nil
// err stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &control{err: err, permanent: true}
}

// After asks Do to wait d before the next attempt instead of the policy's
// delay: the server's Retry-After. A d of zero or less leaves the policy's
// delay. A nil err stays nil.
func After(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &control{err: err, after: d}
}
