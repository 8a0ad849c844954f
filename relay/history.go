package relay

import (
	"context"
	"sort"
	"time"
)

// Delivery history: per-minute counters of the fires dispatchers delivered,
// each agent's recent deliveries and the processes dispatching, kept in the
// store so that every NAS process sharing it shows the same numbers.

// HistoryRetention is how long an engine keeps a minute of history and an
// agent's recent deliveries: a day, and an hour to spare.
const HistoryRetention = 25 * time.Hour

// HistoryRecent is how many recent deliveries an engine keeps per agent.
const HistoryRecent = 100

// HistoryLagBounds are the upper bounds, in seconds, of the lag buckets of
// a HistoryMinute; a last bucket counts the lags above the last bound.
var HistoryLagBounds = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// History outcomes: what became of one delivery attempt.
const (
	// HistoryDelivered: the agent took the fire.
	HistoryDelivered = "delivered"
	// HistoryRetry: the attempt failed and the fire is retried (or, its
	// attempts spent, dead-lettered).
	HistoryRetry = "retry"
	// HistoryRejected: the fire went to the dead letter at once.
	HistoryRejected = "rejected"
	// HistoryDropped: the fire was stale (its job re-armed or cancelled) or
	// a duplicate, so no agent was called.
	HistoryDropped = "dropped"
	// HistoryInstanceStopped: the operator had stopped the fire's instance.
	HistoryInstanceStopped = "instance_stopped"
)

// HistoryOutcomes lists the history outcomes in the order charts stack them.
var HistoryOutcomes = []string{HistoryDelivered, HistoryRetry, HistoryRejected, HistoryDropped, HistoryInstanceStopped}

// HistoryMinute is what dispatchers counted in one minute. Engines add
// minutes together: several processes count into the same minute.
type HistoryMinute struct {
	// Minute is the start of the minute (UTC, whole minutes).
	Minute time.Time
	// Outcomes counts delivery attempts by history outcome.
	Outcomes map[string]int64
	// Retries counts attempts that were a retry (attempt > 1).
	Retries int64
	// Lag counts delivered fires by lag bucket (len(HistoryLagBounds)+1).
	Lag []int64
}

// Add adds o's counts into m (m's minute is kept).
func (m *HistoryMinute) Add(o HistoryMinute) {
	if m.Outcomes == nil {
		m.Outcomes = make(map[string]int64, len(o.Outcomes))
	}
	for k, v := range o.Outcomes {
		m.Outcomes[k] += v
	}
	m.Retries += o.Retries
	if len(m.Lag) < len(HistoryLagBounds)+1 {
		m.Lag = append(m.Lag, make([]int64, len(HistoryLagBounds)+1-len(m.Lag))...)
	}
	for i, v := range o.Lag {
		if i < len(m.Lag) {
			m.Lag[i] += v
		}
	}
}

// LagBucket is the index in HistoryMinute.Lag of a lag.
func LagBucket(lag time.Duration) int {
	s := lag.Seconds()
	for i, b := range HistoryLagBounds {
		if s <= b {
			return i
		}
	}
	return len(HistoryLagBounds)
}

// DeliveryRecord is one delivery attempt as an agent's recent deliveries
// keep it.
type DeliveryRecord struct {
	AgentID    string        `json:"agent_id"`
	JobID      string        `json:"job_id"`
	ScheduleID string        `json:"schedule_id"`
	FireAt     time.Time     `json:"fire_at"`
	Attempt    int           `json:"attempt"`
	Outcome    string        `json:"outcome"` // a History outcome
	Reason     string        `json:"reason,omitempty"`
	Lag        time.Duration `json:"lag"` // after fire_at, when the attempt ended
	At         time.Time     `json:"at"`  // when the attempt ended
}

// ProcessBeat is what a process dispatching fires says of itself, again
// every few seconds while it runs.
type ProcessBeat struct {
	// ID is unique per process run.
	ID string `json:"id"`
	// Kind is "nas" (NAS's own dispatchers) or "relay" (a relay process).
	Kind string `json:"kind"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Dispatchers is how many dispatchers the process runs.
	Dispatchers int       `json:"dispatchers"`
	StartedAt   time.Time `json:"started_at"`
	BeatAt      time.Time `json:"beat_at"`
	// LastClaim is when one of its dispatchers last took a fire to deliver
	// (zero: none yet).
	LastClaim time.Time `json:"last_claim"`
	// Delivered counts the fires it delivered since it started.
	Delivered int64 `json:"delivered"`
}

// History is the optional part of an engine that keeps delivery history
// (bounded by HistoryRetention and HistoryRecent) and the processes'
// beats.
type History interface {
	// AddHistory adds minutes into the stored ones and appends recent to
	// their agents' recent deliveries (in order: the last is the newest).
	AddHistory(ctx context.Context, minutes []HistoryMinute, recent []DeliveryRecord) error
	// HistoryMinutes returns the stored minutes in [from, to), oldest
	// first; minutes nothing was counted in are left out.
	HistoryMinutes(ctx context.Context, from, to time.Time) ([]HistoryMinute, error)
	// RecentDeliveries returns agentID's recent deliveries, newest first,
	// at most max (<= 0: HistoryRecent).
	RecentDeliveries(ctx context.Context, agentID string, max int) ([]DeliveryRecord, error)
	// LastDeliveries returns, per agent with recent deliveries, its newest.
	LastDeliveries(ctx context.Context) (map[string]DeliveryRecord, error)
	// DueHistogram counts the armed one-shots due in each of n steps from
	// from: [from+i*step, from+(i+1)*step).
	DueHistogram(ctx context.Context, from time.Time, step time.Duration, n int) ([]int64, error)
	// Beat records p, replacing its previous beat.
	Beat(ctx context.Context, p ProcessBeat) error
	// Processes returns the beats at or after since, by kind then id;
	// older ones are forgotten.
	Processes(ctx context.Context, since time.Time) ([]ProcessBeat, error)
}

// SortBeats sorts beats by kind, then host, then id.
func SortBeats(beats []ProcessBeat) {
	sort.Slice(beats, func(i, j int) bool {
		a, b := beats[i], beats[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return a.ID < b.ID
	})
}
