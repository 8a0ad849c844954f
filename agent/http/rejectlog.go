package agenthttp

import (
	"log/slog"
	"sync"
	"time"
)

// RejectLogEvery is how often, at most, the agent writes a line about a
// refused token (a fire's or a reconcile request's): the first refusal of
// a period is logged with its reason, the others are only counted, and the
// first one after the period is logged with how many went unlogged
// (`unlogged`). A flood of forged tokens so writes a line a minute, while
// chronos_agent_fires_total{outcome="unauthorized"} counts every one.
const RejectLogEvery = time.Minute

// rejectLog samples the log lines of refused tokens.
type rejectLog struct {
	mu       sync.Mutex
	last     time.Time // when the last line was written; zero before the first
	unlogged int64     // refusals since then that wrote no line
}

// warn logs one refused token through log, unless a line was written less
// than RejectLogEvery ago, in which case it only counts it.
func (r *rejectLog) warn(now time.Time, log *slog.Logger, msg string, args ...any) {
	r.mu.Lock()
	if !r.last.IsZero() && now.Sub(r.last) < RejectLogEvery {
		r.unlogged++
		r.mu.Unlock()
		return
	}
	n := r.unlogged
	r.last, r.unlogged = now, 0
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "unlogged", n)
	}
	log.Warn(msg, args...)
}
