package chain

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// stormWindow is the span the spawn storm check counts spawns in.
const stormWindow = time.Minute

// IsOpen reports whether the breaker holds the class at now: open and not
// yet at its resume time.
func (b *Breaker) IsOpen(now time.Time) bool {
	return b.State == BreakerOpen && b.ResumeAt != nil && now.Before(*b.ResumeAt)
}

// Settle closes an open breaker whose resume time has come and reports
// whether it did. There is no half-open state: the next start is allowed,
// and a further failure streak or invariant violation opens it again.
func (b *Breaker) Settle(now time.Time) bool {
	if b.State != BreakerOpen || b.IsOpen(now) {
		return false
	}
	b.State, b.Failures = BreakerClosed, nil
	return true
}

// Deadline returns the resume time of an open breaker.
func (b *Breaker) Deadline() (time.Time, bool) {
	if b.State != BreakerOpen || b.ResumeAt == nil {
		return time.Time{}, false
	}
	return *b.ResumeAt, true
}

// NoteSpawn counts a step of the class spawned at now.
func (b *Breaker) NoteSpawn(now time.Time) {
	b.trimSpawns(now)
	b.Spawns = append(b.Spawns, now.UTC())
}

// RecentSpawns returns the steps spawned in the minute before now.
func (b *Breaker) RecentSpawns(now time.Time) int {
	n := 0
	for _, t := range b.Spawns {
		if now.Sub(t) < stormWindow {
			n++
		}
	}
	return n
}

func (b *Breaker) trimSpawns(now time.Time) {
	kept := b.Spawns[:0:0]
	for _, t := range b.Spawns {
		if now.Sub(t) < stormWindow {
			kept = append(kept, t)
		}
	}
	b.Spawns = kept
}

// Opening is what an opening of the breaker says.
type Opening struct {
	Reason string
	// RunIDs are the last run ids of the failing chains (up to 3 kept).
	RunIDs []string
}

// RecordClose counts a closed chain: a success clears the failure streak,
// a failure joins it (failures older than the policy's window drop out) and
// an invariant violation (a chain closed by a limit) opens the breaker at
// once. It returns the opening when the breaker opened now.
func (b *Breaker) RecordClose(c *Chain, p Policy, now time.Time) (Opening, bool) {
	if c.Outcome == OutcomeSuccess {
		b.Failures = nil
		return Opening{}, false
	}
	runs := c.RunIDs()
	last := ""
	if len(runs) > 0 {
		last = runs[len(runs)-1]
	}
	kept := b.Failures[:0:0]
	for _, f := range b.Failures {
		if now.Sub(f.At) < p.BreakerWindow {
			kept = append(kept, f)
		}
	}
	b.Failures = append(kept, Failure{At: now.UTC(), ChainID: c.ID, Reason: c.ClosedReason, RunID: last})
	if b.IsOpen(now) {
		return Opening{}, false
	}
	switch {
	case c.Violated():
		return b.Open(Opening{Reason: "invariant violation: chain " + c.ID + " " + c.ClosedReason, RunIDs: lastN(runs, 3)}, p, now), true
	case len(b.Failures) >= p.BreakerFailures:
		var reasons, ids []string
		for _, f := range b.Failures {
			reasons = append(reasons, f.ChainID+": "+f.Reason)
			if f.RunID != "" {
				ids = append(ids, f.RunID)
			}
		}
		why := fmt.Sprintf("%d consecutive chain failures within %s (%s)", len(b.Failures), p.BreakerWindow, strings.Join(reasons, "; "))
		return b.Open(Opening{Reason: why, RunIDs: lastN(ids, 3)}, p, now), true
	}
	return Opening{}, false
}

// Open opens the breaker at now for the policy's cooldown and returns the
// opening as recorded.
func (b *Breaker) Open(o Opening, p Policy, now time.Time) Opening {
	b.State, b.Reason, b.LastRunIDs = BreakerOpen, o.Reason, lastN(o.RunIDs, 3)
	b.OpenedAt, b.ResumeAt = utcPtr(now), utcPtr(now.Add(p.BreakerCooldown))
	b.Openings++
	return Opening{Reason: b.Reason, RunIDs: b.LastRunIDs}
}

// Reset closes the breaker by hand and clears its failure streak; it
// reports whether it was open.
func (b *Breaker) Reset() bool {
	was := b.State == BreakerOpen
	b.State, b.Failures = BreakerClosed, nil
	return was
}

func lastN(s []string, n int) []string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return append([]string(nil), s...)
}

// Refusal reasons, the labels of the refusal counts.
const (
	RefusedDuplicate   = "duplicate"
	RefusedLimit       = "limit"
	RefusedBreakerOpen = "breaker_open"
	RefusedClosed      = "closed"
)

// RefusalReasons lists every refusal reason.
var RefusalReasons = []string{RefusedDuplicate, RefusedLimit, RefusedBreakerOpen, RefusedClosed}

// RefusalReason names the reason of a refusal error ("" for an error that
// is no refusal).
func RefusalReason(err error) string {
	switch {
	case errors.Is(err, ErrDuplicate):
		return RefusedDuplicate
	case errors.Is(err, ErrLimit):
		return RefusedLimit
	case errors.Is(err, ErrBreakerOpen):
		return RefusedBreakerOpen
	case errors.Is(err, ErrClosed):
		return RefusedClosed
	}
	return ""
}

// NoteRefusal counts a refusal of the class.
func (b *Breaker) NoteRefusal(err error) {
	r := RefusalReason(err)
	if r == "" {
		return
	}
	if b.Refusals == nil {
		b.Refusals = map[string]int{}
	}
	b.Refusals[r]++
}
