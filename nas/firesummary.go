package nas

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// FireSummaryEvery is how often, at most, NAS writes its INFO summary of
// the one-shots agents armed and the fires it relayed (a line written
// when an event comes after the period is over: an idle NAS writes none).
// A fire or an arm of its own gets a line at DEBUG (a fire the agent
// refused or did not take, at WARN): at INFO, a NAS relaying thousands of
// fires a second writes one line a minute, not several per fire.
const FireSummaryEvery = time.Minute

// fireSummary counts the arms and the relay route's outcomes since its
// last summary line.
type fireSummary struct {
	mu     sync.Mutex
	since  time.Time        // the start of the period; zero before the first fire
	counts map[string]int64 // outcome (the delivery metric's label) → fires
	maxLag time.Duration    // the largest lag of a delivered fire
}

// summaryArmed is the summary's count of one-shots armed anew (a
// provision that changed the armed fire), which is most of what agents do
// between fires: each re-arms its job's next one.
const summaryArmed = "armed"

// noteSummary counts one event (an outcome of the relay route, or
// summaryArmed) in the summary, and writes the summary when its period is
// over.
func (s *core) noteSummary(ctx context.Context, event string, lag time.Duration) {
	if args := s.summary.note(s.now(), event, lag); args != nil && s.log.Enabled(ctx, slog.LevelInfo) {
		s.log.Log(ctx, slog.LevelInfo, "fires summary", args...)
	}
}

// note counts one fire at now; when FireSummaryEvery has passed since the
// period began, it returns the summary's attributes and starts the next
// period, else nil.
func (f *fireSummary) note(now time.Time, outcome string, lag time.Duration) []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		f.since = now
	}
	if f.counts == nil {
		f.counts = make(map[string]int64, 6)
	}
	f.counts[outcome]++
	f.maxLag = max(f.maxLag, lag)
	over := now.Sub(f.since)
	if over < FireSummaryEvery {
		return nil
	}
	args := []any{"over", over.Round(time.Second).String()}
	for _, o := range []string{summaryArmed, deliveryDelivered, deliveryRetry, deliveryRejected, deliveryDropped, deliveryDuplicate, deliveryInstanceStopped} {
		if n := f.counts[o]; n > 0 {
			args = append(args, o, n)
		}
	}
	args = append(args, "max_lag_ms", f.maxLag.Milliseconds())
	clear(f.counts)
	f.since, f.maxLag = now, 0
	return args
}
