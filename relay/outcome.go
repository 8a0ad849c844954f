package relay

import (
	"context"
	"time"
)

// OutcomeKind says what a dispatcher does with a lease after one delivery.
//
//	Done  ──▶ Ack  (the one-shot is finished and removed)
//	Retry ──▶ Nack (due again after a backoff) or, once the attempts or
//	          the age are spent, Kill
//	Dead  ──▶ Kill (the dead letter, at once)
//
// The zero OutcomeKind is not a valid verdict; a dispatcher treats it as
// Retry so that a faulty Deliverer never loses a fire.
type OutcomeKind int

// Outcome kinds.
const (
	Done OutcomeKind = iota + 1
	Retry
	Dead
)

// String returns "done", "retry" or "dead" (metric label values).
func (k OutcomeKind) String() string {
	switch k {
	case Done:
		return "done"
	case Retry:
		return "retry"
	case Dead:
		return "dead"
	}
	return "invalid"
}

// Outcome is the verdict of one delivery: what the dispatcher does next.
type Outcome struct {
	Kind OutcomeKind
	// RetryAfter, for Retry, is the least delay before the next attempt (a
	// Retry-After the other side asked for); the backoff may wait longer.
	RetryAfter time.Duration
	// Reason says what happened, for logs, the one-shot's last error and the
	// dead letter.
	Reason string
	// ColdStart, for Retry, marks a failure that looks like an agent waking
	// up (connection refused, 503): the first retries come fast.
	ColdStart bool
	// AgentDown, for Retry, says the agent is not answering (refused,
	// timed out, unreachable, waking: 503, 425, 429): the dispatcher then
	// holds all of the agent's fires for a while and probes it with one
	// fire at a time (Queue.Down) instead of retrying each of them.
	AgentDown bool
	// Record, for Done, is the fire's last-fire record, which the
	// dispatcher writes with the ack: in the same script call on a queue
	// that is an AckRecorder, else (when the queue keeps LastFires) just
	// before it. A deliverer in NAS's own process sets it, so a delivered
	// fire costs one store write, not two.
	Record *LastFire
}

// AckRecorder is an optional part of a Queue: AckRecord acks l as Ack does
// and writes f as RecordLastFire does, in one step. The record is written
// even when the lease turns out lost (the fire did reach the agent), and
// then ErrLeaseLost is returned as Ack returns it.
type AckRecorder interface {
	AckRecord(ctx context.Context, l Lease, f LastFire) error
}

// Deliverer delivers one leased fire. It must return when ctx ends; the
// dispatcher cancels ctx when the lease is lost or a shutdown gives up
// waiting.
type Deliverer interface {
	Deliver(ctx context.Context, l Lease) Outcome
}

// DelivererFunc adapts a function to a Deliverer.
type DelivererFunc func(ctx context.Context, l Lease) Outcome

// Deliver calls f.
func (f DelivererFunc) Deliver(ctx context.Context, l Lease) Outcome { return f(ctx, l) }
