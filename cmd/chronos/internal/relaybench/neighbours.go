package relaybench

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The neighbours of a burst: one agent that answers slowly and one that is
// waking (answers 503 with a Retry-After for a while), whose fires are due
// with the burst's first. The burst's own agents are "the others": their
// lags are reported apart, to show whether the neighbours held them up.
const (
	slowAgent   = "neighbour-slow"
	wakingAgent = "neighbour-waking"
)

// Neighbours are the neighbour agents of a run.
type Neighbours struct {
	Slow       int           // fires of the slow agent (0: none)
	SlowAnswer time.Duration // how long the slow agent takes to answer
	Waking     int           // fires of the waking agent (0: none)
	WakingFor  time.Duration // how long after the first fire_at it answers 503
	RetryAfter time.Duration // the Retry-After of its 503s
}

// fires is how many fires the neighbours add to a run.
func (n Neighbours) fires() int { return n.Slow + n.Waking }

// validate reports a neighbour setting out of range.
func (n Neighbours) validate() error {
	switch {
	case n.Slow < 0 || n.Waking < 0:
		return fmt.Errorf("--slow and --waking must not be negative")
	case n.SlowAnswer < 0 || n.WakingFor < 0 || n.RetryAfter < 0:
		return fmt.Errorf("--slow-answer, --waking-for and --waking-retry-after must not be negative")
	}
	return nil
}

// neighbour is one neighbour agent and how many fires it has.
type neighbour struct {
	name  string
	fires int
}

// agents lists the neighbours' agents with their fire counts.
func (n Neighbours) agents() []neighbour {
	var out []neighbour
	if n.Slow > 0 {
		out = append(out, neighbour{slowAgent, n.Slow})
	}
	if n.Waking > 0 {
		out = append(out, neighbour{wakingAgent, n.Waking})
	}
	return out
}

// neighbourhood is the sink's side of the neighbours: it answers for them
// and keeps their lags and the requests the waking agent refused.
type neighbourhood struct {
	n Neighbours

	mu      sync.Mutex
	wakeAt  time.Time // the waking agent answers from then on
	refused int
	lags    map[string][]time.Duration // agent → lags of first arrivals
}

// hold answers for a neighbour before the fire is verified: the waking
// agent's 503 (reported true, answered) or the slow agent's delay.
func (h *neighbourhood) hold(w http.ResponseWriter, r *http.Request, agent string, now time.Time) bool {
	switch agent {
	case wakingAgent:
		h.mu.Lock()
		waking := now.Before(h.wakeAt)
		if waking {
			h.refused++
		}
		h.mu.Unlock()
		if waking {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Retry-After", strconv.Itoa(int(h.n.RetryAfter.Seconds())))
			answer(w, http.StatusServiceUnavailable, []byte(`{"error":"starting"}`))
			return true
		}
	case slowAgent:
		select {
		case <-time.After(h.n.SlowAnswer):
		case <-r.Context().Done():
		}
	}
	return false
}

// startAt sets the burst's first fire_at, which the waking agent's
// refusals count from.
func (h *neighbourhood) startAt(first time.Time) {
	h.mu.Lock()
	h.wakeAt = first.Add(h.n.WakingFor)
	h.mu.Unlock()
}

// record keeps a neighbour's lag; it reports whether agent is one.
func (h *neighbourhood) record(agent string, lag time.Duration) bool {
	if agent != slowAgent && agent != wakingAgent {
		return false
	}
	h.mu.Lock()
	h.lags[agent] = append(h.lags[agent], lag)
	h.mu.Unlock()
	return true
}

// LagSummary is the lag percentiles of a group of fires, in milliseconds.
type LagSummary struct {
	Fires int     `json:"fires"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// summarize returns the lag percentiles of lags (sorted in place).
func summarize(lags []time.Duration) LagSummary {
	if len(lags) == 0 {
		return LagSummary{}
	}
	slices.Sort(lags)
	return LagSummary{Fires: len(lags), P50Ms: msOf(percentile(lags, 0.50)), P99Ms: msOf(percentile(lags, 0.99)),
		MaxMs: msOf(lags[len(lags)-1])}
}

// NeighbourResult is what a run with neighbours measured of them.
type NeighbourResult struct {
	Others        LagSummary  `json:"others"`
	Slow          *LagSummary `json:"slow,omitempty"`
	Waking        *LagSummary `json:"waking,omitempty"`
	WakingRefused int         `json:"waking_requests_refused,omitempty"`
}

// result summarizes the neighbours' fires.
func (h *neighbourhood) result(others []time.Duration) *NeighbourResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	res := &NeighbourResult{Others: summarize(others), WakingRefused: h.refused}
	if h.n.Slow > 0 {
		s := summarize(h.lags[slowAgent])
		res.Slow = &s
	}
	if h.n.Waking > 0 {
		s := summarize(h.lags[wakingAgent])
		res.Waking = &s
	}
	return res
}

// writeText writes the neighbours' lines of a result.
func (r *NeighbourResult) writeText(w io.Writer) {
	line := func(name string, s LagSummary) {
		fmt.Fprintf(w, "%-7s p50 %.1fms  p99 %.1fms  max %.1fms after fire_at (%d fires)\n", name+":", s.P50Ms, s.P99Ms, s.MaxMs, s.Fires)
	}
	line("others", r.Others)
	if r.Slow != nil {
		line("slow", *r.Slow)
	}
	if r.Waking != nil {
		line("waking", *r.Waking)
		fmt.Fprintf(w, "waking: %d requests answered 503 while it woke\n", r.WakingRefused)
	}
}
