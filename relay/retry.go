package relay

import (
	"fmt"
	"time"

	"github.com/chronoscron/chronos/internal/backoff"
)

// RetryPolicy decides when a failed delivery is tried again and when the
// relay gives up. A zero field takes its default (see WithDefaults).
//
// The delay after the n-th failed attempt is drawn with full jitter from
// [Base, min(MaxDelay, Base·2^(n−1))], so a crowd of fires that failed
// together spreads out, and is never shorter than Base. A failure marked
// ColdStart uses the ColdStart delays for the first attempts instead, then
// continues the normal ladder from its first step. An Outcome's RetryAfter is
// a floor for either (it may exceed MaxDelay). The fire is dead-lettered when
// n reaches MaxAttempts or when the next attempt would start more than MaxAge
// after fire_at.
type RetryPolicy struct {
	// Base is the first step of the ladder. Default 1s.
	Base time.Duration
	// MaxDelay caps a ladder step. Default 5m.
	MaxDelay time.Duration
	// MaxAttempts is how many deliveries one fire gets. Default 10.
	MaxAttempts int
	// MaxAge is how long after fire_at a fire is still retried. Default 24h.
	MaxAge time.Duration
	// ColdStart are the delays after the first cold-start failures, each
	// stretched by up to a fifth at random. Default 250ms, 500ms, 1s. A
	// policy that wants none sets NoColdStart.
	ColdStart []time.Duration
	// NoColdStart turns the cold-start ladder off.
	NoColdStart bool
}

// WithDefaults returns p with every zero field set to its default.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Base == 0 {
		p.Base = time.Second
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = 5 * time.Minute
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 10
	}
	if p.MaxAge == 0 {
		p.MaxAge = 24 * time.Hour
	}
	if p.ColdStart == nil && !p.NoColdStart {
		p.ColdStart = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}
	}
	if p.NoColdStart {
		p.ColdStart = nil
	}
	return p
}

// validate reports the first field out of range, by name.
func (p RetryPolicy) validate() error {
	switch {
	case p.Base <= 0:
		return fmt.Errorf("Retry.Base %s must be positive", p.Base)
	case p.MaxDelay < p.Base:
		return fmt.Errorf("Retry.MaxDelay %s must be at least Retry.Base %s", p.MaxDelay, p.Base)
	case p.MaxAttempts < 1:
		return fmt.Errorf("Retry.MaxAttempts %d must be at least 1", p.MaxAttempts)
	case p.MaxAge <= 0:
		return fmt.Errorf("Retry.MaxAge %s must be positive", p.MaxAge)
	}
	for i, d := range p.ColdStart {
		if d <= 0 {
			return fmt.Errorf("Retry.ColdStart[%d] %s must be positive", i, d)
		}
	}
	return nil
}

// Next returns the delay before the next attempt of l after the failed
// delivery o at now, or ok=false when the fire must be dead-lettered
// instead. l.Attempt is the attempt that just failed (1 for the first).
// rnd(n) returns a uniform random number in [0, n) for n > 0. p must have
// its defaults set.
func (p RetryPolicy) Next(l Lease, o Outcome, now time.Time, rnd func(n int64) int64) (delay time.Duration, ok bool) {
	n := max(l.Attempt, 1)
	if n >= p.MaxAttempts {
		return 0, false
	}
	step := n
	if o.ColdStart && len(p.ColdStart) > 0 {
		if n <= len(p.ColdStart) {
			d := p.ColdStart[n-1]
			delay = backoff.Between(d, d+d/5, rnd)
		}
		step = n - len(p.ColdStart)
	}
	if delay == 0 {
		delay = p.ladder(rnd).Delay(step)
	}
	delay = max(delay, o.RetryAfter)
	if now.Add(delay).Sub(l.FireAt) > p.MaxAge {
		return 0, false
	}
	return delay, true
}

// Hold returns how long an agent that n deliveries in a row found not
// answering is left alone before the next probe: the cold-start delays for
// the first failures, then the normal ladder, never shorter than o's
// RetryAfter (which then holds for the agent as a whole). Unlike Next it
// never gives up: the fires' own attempts and age decide that. p must have
// its defaults set.
func (p RetryPolicy) Hold(n int, o Outcome, rnd func(n int64) int64) time.Duration {
	n = max(n, 1)
	step := n
	var d time.Duration
	if len(p.ColdStart) > 0 {
		if n <= len(p.ColdStart) {
			c := p.ColdStart[n-1]
			d = backoff.Between(c, c+c/5, rnd)
		}
		step = n - len(p.ColdStart)
	}
	if d == 0 {
		d = p.ladder(rnd).Delay(step)
	}
	return max(d, o.RetryAfter)
}

// ladder is the normal ladder of p as a backoff schedule drawn with rnd.
func (p RetryPolicy) ladder(rnd func(n int64) int64) backoff.Policy {
	return backoff.Policy{Base: p.Base, Max: p.MaxDelay, Jitter: backoff.JitterAboveBase, Rand: rnd}
}

// Ladder names the ladder a retry is scheduled on, for metrics.
type Ladder int

const (
	// NormalLadder is the exponential ladder from Base to MaxDelay.
	NormalLadder Ladder = iota
	// ColdStartLadder is the short ladder of a failure marked ColdStart.
	ColdStartLadder
)

// ladderOf returns the ladder a retry of the failed delivery o is counted on.
func ladderOf(o Outcome) Ladder {
	if o.ColdStart {
		return ColdStartLadder
	}
	return NormalLadder
}
