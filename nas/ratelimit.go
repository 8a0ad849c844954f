package nas

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// agentLimiter is a token bucket per agent id (never per address: a client
// controls the address headers a proxy forwards).
type agentLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newAgentLimiter(perSecond float64, burst int) *agentLimiter {
	l := rate.Limit(perSecond)
	if perSecond <= 0 {
		l = rate.Inf
	}
	return &agentLimiter{limit: l, burst: burst, buckets: map[string]*rate.Limiter{}}
}

// Allow takes one token of agentID's bucket at now. When none is left it
// returns false and how long until one is.
func (a *agentLimiter) Allow(agentID string, now time.Time) (bool, time.Duration) {
	a.mu.Lock()
	b, ok := a.buckets[agentID]
	if !ok {
		b = rate.NewLimiter(a.limit, a.burst)
		a.buckets[agentID] = b
	}
	a.mu.Unlock()
	if b.AllowN(now, 1) {
		return true, 0
	}
	r := b.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	if wait <= 0 {
		wait = time.Second
	}
	return false, wait
}
