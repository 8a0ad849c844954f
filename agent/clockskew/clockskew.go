// Package clockskew estimates how far NAS's clock is from the agent's, so
// that the agent judges NAS's fire tokens and fired slots by NAS's clock and
// reports a host clock that has drifted.
//
// The estimate is the offset NAS − local. It is learnt from two kinds of
// evidence, each a bound on the offset that holds whatever the network's
// delay:
//
//   - a NAS answer's Date header, read against the local times the request
//     was sent and its answer received: NAS's clock at the answer lies in
//     [Date, Date+1s) and the local time of that instant in [sent,
//     received], so the offset lies in [Date − received, Date + 1s − sent];
//   - the iat of a fire token whose signature verified: NAS signed it at
//     iat, before the agent received it, so the offset is at least
//     iat − now.
//
// The estimate moves only as far as new evidence requires: an agent whose
// clock agrees with NAS's within the Date header's second keeps an offset
// of zero, and one a replayed old token reached is not moved at all (an
// old iat is a weaker lower bound than the one held).
package clockskew

import (
	"log/slog"
	"math"
	"sync"
	"time"
)

// DefaultWarnAbove is the skew above which the agent warns (once) that its
// clock differs from NAS's.
const DefaultWarnAbove = 5 * time.Second

// dateResolution is the resolution of an HTTP Date header.
const dateResolution = time.Second

// Sources of evidence, as logged.
const (
	SourceDate   = "nas_date" // a NAS answer's Date header
	SourceIssued = "token_iat"
)

// Options configure an Estimator. Zero fields take the defaults named.
type Options struct {
	// Local is the host's clock; default time.Now.
	Local func() time.Time
	// WarnAbove is the skew (either way) above which a warning is logged,
	// once; default DefaultWarnAbove.
	WarnAbove time.Duration
	// Logger receives the warning; default slog.Default().
	Logger *slog.Logger
}

// Estimator holds the estimate of NAS's clock against the host's. It is
// safe for concurrent use; the zero value is not usable, use New.
type Estimator struct {
	local     func() time.Time
	warnAbove time.Duration
	log       *slog.Logger

	mu     sync.Mutex
	offset time.Duration // NAS − local
	known  bool
	warned bool
}

// New returns an estimator with an offset of zero until evidence arrives.
func New(o Options) *Estimator {
	if o.Local == nil {
		o.Local = time.Now
	}
	if o.WarnAbove <= 0 {
		o.WarnAbove = DefaultWarnAbove
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Estimator{local: o.Local, warnAbove: o.WarnAbove, log: o.Logger}
}

// Local returns the host's clock reading.
func (e *Estimator) Local() time.Time { return e.local() }

// Now returns NAS's time as estimated: the host's clock plus the offset.
func (e *Estimator) Now() time.Time { return e.local().Add(e.Offset()) }

// Offset returns the estimated offset NAS − local: positive when the host's
// clock is behind NAS's, negative when it is ahead.
func (e *Estimator) Offset() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.offset
}

// Known reports whether any evidence has been seen.
func (e *Estimator) Known() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.known
}

// Seconds returns the offset in seconds, for a gauge.
func (e *Estimator) Seconds() float64 { return e.Offset().Seconds() }

// ObserveDate takes the Date header date of a NAS answer to a request sent
// at local time sent and answered at local time received. A zero date (no
// or an unreadable header) or received before sent is ignored.
func (e *Estimator) ObserveDate(sent, received, date time.Time) {
	if date.IsZero() || received.Before(sent) {
		return
	}
	lo := date.Sub(received)
	hi := date.Add(dateResolution).Sub(sent)
	e.bound(lo, hi, SourceDate)
}

// ObserveIssued takes the iat of a fire token whose signature verified,
// received now (by the host's clock).
func (e *Estimator) ObserveIssued(iat time.Time) {
	if iat.IsZero() {
		return
	}
	e.bound(iat.Sub(e.local()), time.Duration(math.MaxInt64), SourceIssued)
}

// bound moves the offset into [lo, hi], as little as it takes, and warns
// once when it then exceeds the threshold.
func (e *Estimator) bound(lo, hi time.Duration, source string) {
	e.mu.Lock()
	prev := e.offset
	switch {
	case e.offset < lo:
		e.offset = lo
	case e.offset > hi:
		e.offset = hi
	}
	e.known = true
	off := e.offset
	warn := !e.warned && abs(off) > e.warnAbove
	if warn {
		e.warned = true
	}
	e.mu.Unlock()
	if warn {
		e.log.Warn("the host's clock differs from NAS's; fire tokens and slots are judged by NAS's clock as estimated",
			"clock_skew", off.Round(time.Millisecond).String(), "direction", Direction(off), "source", source)
	} else if off != prev && abs(off-prev) > e.warnAbove {
		e.log.Info("clock skew estimate changed", "clock_skew", off.Round(time.Millisecond).String(), "source", source)
	}
}

// Direction says in words which way the host's clock is off for offset
// (NAS − local).
func Direction(offset time.Duration) string {
	switch {
	case offset > 0:
		return "the host's clock is behind NAS's"
	case offset < 0:
		return "the host's clock is ahead of NAS's"
	}
	return "in step"
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
