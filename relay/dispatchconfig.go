package relay

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// DispatcherConfig configures a Dispatcher. A zero field takes its default
// (see WithDefaults).
type DispatcherConfig struct {
	// Batch is the most one-shots claimed in one call. Default 64.
	Batch int
	// Concurrency bounds the deliveries in flight. Default 64.
	Concurrency int
	// PerAgent bounds the deliveries in flight to one agent, over every
	// process sharing the store (relay.per_agent.parallelism); an agent's
	// own AgentPolicy overrides it. Default 4.
	PerAgent int
	// PerAgentRate bounds the deliveries per second to one agent
	// (relay.per_agent.rate); 0 leaves it unbounded. Default 0.
	PerAgentRate float64
	// MisfireGrace is how late after its fire_at a fire may still be
	// delivered; a fire claimed later (an agent disabled for long, a store
	// that was down) is dead-lettered instead, so its agent learns of it as
	// a failed fire. Default Retry.MaxAge.
	MisfireGrace time.Duration
	// LeaseFor is the lease taken on each claim. Leases of slow deliveries
	// and of waiting fires are extended before they lapse; the reaper runs
	// every LeaseFor/2. Default 30s.
	LeaseFor time.Duration
	// Retry is the backoff and give-up policy.
	Retry RetryPolicy
	// Recheck is the longest the dispatcher waits without asking the engine
	// for the next due time, a safety net for a lost wake-up. Default 30s.
	Recheck time.Duration
	// DrainTimeout bounds how long Run waits for deliveries in flight once
	// its context ends; then their contexts are cancelled. Default 30s.
	DrainTimeout time.Duration
	// OpTimeout bounds each engine call. Default 5s. (A burst's acks share
	// their contexts: each call still gets at most OpTimeout, and at least
	// 98% of it.)
	OpTimeout time.Duration
	// Logger receives the dispatcher's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives counts and observations. Default NopMetrics.
	Metrics Metrics
	// Now is the clock for fire lag and retry age. Default time.Now.
	Now func() time.Time
	// Rand returns a uniform number in [0, n) for jitter. Default
	// math/rand/v2.Int64N.
	Rand func(n int64) int64
}

// WithDefaults returns c with every zero field set to its default.
func (c DispatcherConfig) WithDefaults() DispatcherConfig {
	if c.Batch == 0 {
		c.Batch = 64
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.PerAgent == 0 {
		c.PerAgent = 4
	}
	if c.LeaseFor == 0 {
		c.LeaseFor = 30 * time.Second
	}
	c.Retry = c.Retry.WithDefaults()
	if c.MisfireGrace == 0 {
		c.MisfireGrace = c.Retry.MaxAge
	}
	if c.Recheck == 0 {
		c.Recheck = 30 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = NopMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Int64N
	}
	return c
}

// validate reports the first field out of range, by name.
func (c DispatcherConfig) validate() error {
	switch {
	case c.Batch < 1:
		return fmt.Errorf("DispatcherConfig.Batch %d must be at least 1", c.Batch)
	case c.Concurrency < 1:
		return fmt.Errorf("DispatcherConfig.Concurrency %d must be at least 1", c.Concurrency)
	case c.PerAgent < 1:
		return fmt.Errorf("DispatcherConfig.PerAgent %d must be at least 1", c.PerAgent)
	case c.PerAgentRate < 0:
		return fmt.Errorf("DispatcherConfig.PerAgentRate %v must not be negative", c.PerAgentRate)
	case c.MisfireGrace < 0:
		return fmt.Errorf("DispatcherConfig.MisfireGrace %s must not be negative", c.MisfireGrace)
	case c.LeaseFor < 4*time.Millisecond:
		return fmt.Errorf("DispatcherConfig.LeaseFor %s must be at least 4ms", c.LeaseFor)
	case c.Recheck <= 0:
		return fmt.Errorf("DispatcherConfig.Recheck %s must be positive", c.Recheck)
	case c.DrainTimeout <= 0:
		return fmt.Errorf("DispatcherConfig.DrainTimeout %s must be positive", c.DrainTimeout)
	case c.OpTimeout <= 0:
		return fmt.Errorf("DispatcherConfig.OpTimeout %s must be positive", c.OpTimeout)
	}
	return c.Retry.validate()
}

// Metrics receives what a dispatcher observes. Implementations must be safe
// for concurrent use.
type Metrics interface {
	// ObserveFireLag records how long after fire_at a fire's first delivery
	// attempt started.
	ObserveFireLag(lag time.Duration)
	// CountOutcome counts one delivery attempt by the deliverer's verdict.
	CountOutcome(kind OutcomeKind)
	// CountRetry counts a retry scheduled on ladder.
	CountRetry(ladder Ladder)
	// CountDeadLetter counts a fire moved to the dead letter.
	CountDeadLetter()
}

// NopMetrics discards everything.
type NopMetrics struct{}

// ObserveFireLag implements Metrics.
func (NopMetrics) ObserveFireLag(time.Duration) {}

// CountOutcome implements Metrics.
func (NopMetrics) CountOutcome(OutcomeKind) {}

// CountRetry implements Metrics.
func (NopMetrics) CountRetry(Ladder) {}

// CountDeadLetter implements Metrics.
func (NopMetrics) CountDeadLetter() {}
