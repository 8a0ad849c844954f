package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// State is where a one-shot is in its life.
//
//	armed ──claim──▶ leased ──ack──▶ (deleted)
//	  ▲                │ nack (retry at t)
//	  └────────────────┤
//	                   └─dead-letter──▶ dead ──replay──▶ armed
//
// An expired lease is returned to armed by the reaper (its attempt counter
// and fencing token keep increasing, so the old holder can no longer ack).
type State string

// States of a one-shot.
const (
	StateArmed  State = "armed"
	StateLeased State = "leased"
	StateDead   State = "dead"
)

// OneShot is one armed fire: the armed row of (AgentID, JobID) and its due
// entry are the same record, written and removed together.
type OneShot struct {
	ScheduleID string
	AgentID    string
	InstanceID string
	JobID      string
	FireAt     time.Time // when the agent wants it; never delivered before
	// FireAtSpelling is how the agent wrote FireAt when that differs from
	// the canonical RFC 3339 UTC form (contract.Time's Spelling), else "".
	// Engines keep it with the row, unread, so that NAS reports the fire
	// back in the agent's own spelling.
	FireAtSpelling string
	CallbackURL    string
	// Flex is the fire's flexible window: the agent accepts delivery
	// anywhere in [FireAt, FireAt+Flex]. 0: at FireAt.
	Flex time.Duration
	// Attempt counts claims so far (0 before the first); it doubles as the
	// fencing token of the current lease.
	Attempt int
	State   State
	// DueAt is when the entry is next due: FireAt, or a retry time after a nack.
	DueAt     time.Time
	CreatedAt time.Time
	// LastError is the reason of the last failed attempt, if any.
	LastError string
	// Direct is the fire's direct delivery, when it has one: a dispatcher
	// calls the agent itself and signs under the job's cron key.
	Direct DirectKey
}

// DirectKey is the cron key of a job armed for direct delivery, as the store
// keeps it: sealed (cronkey.Sealer), never in the clear. The zero value means
// NAS-mediated delivery.
type DirectKey struct {
	// Sealed is the job's cron key sealed for its row; "" for NAS-mediated.
	Sealed string
	// KeyID names the key (the `kid` of the tokens it signs).
	KeyID string
	// MintedAt is when NAS minted the key.
	MintedAt time.Time
}

// IsDirect reports whether the fire is delivered directly.
func (d DirectKey) IsDirect() bool { return d.Sealed != "" }

// ArmRequest asks to arm job JobID of AgentID at FireAt (an upsert).
type ArmRequest struct {
	AgentID    string
	InstanceID string
	JobID      string
	FireAt     time.Time
	// FireAtSpelling is how the agent wrote FireAt, "" for the canonical
	// form (see OneShot). Arming the same instant in another spelling keeps
	// the schedule id and takes the new spelling.
	FireAtSpelling string
	CallbackURL    string
	// Flex is the fire's flexible window (0 to MaxFlex): delivery anywhere
	// in [FireAt, FireAt+Flex] is fine with the agent.
	Flex time.Duration
	// DueAt, when set, is when the fire is first due: within the window,
	// [FireAt, FireAt+Flex] (see FlexDue). Zero: FireAt.
	DueAt time.Time
	// ScheduleID is the id to use if this arm creates or replaces the
	// one-shot; callers pass a fresh unique id every time.
	ScheduleID string
	// MaxArmed, when positive, is the agent's quota: arming a job that is not
	// yet armed fails with ErrQuotaExceeded once the agent has MaxArmed.
	MaxArmed int
	// Direct, when set, arms the fire for direct delivery under this fresh
	// key, unless the job's row already holds a key minted at or after
	// KeepKeyFrom: that key is kept (and returned in the result) and this
	// one is discarded. Zero: NAS-mediated delivery (a key the row held is
	// dropped).
	Direct DirectKey
	// KeepKeyFrom: see Direct. A re-key (an operator's, or a key's age)
	// moves it forward.
	KeepKeyFrom time.Time
}

// ArmResult is the outcome of an Arm.
type ArmResult struct {
	OneShot OneShot
	// Changed is false when the job was already armed at the same instant
	// (the same schedule id is returned and nothing was written).
	Changed bool
	// Replaced is the schedule id of the one-shot this arm replaced, if any.
	Replaced string
	// Rekeyed is true when the job was armed before and this arm changed
	// its row's cron key (see ArmKey): it stored the request's fresh key in
	// place of another, or switched the fire between direct and mediated
	// delivery. An arm of the same fire that only does that keeps the
	// schedule id and is not Changed.
	Rekeyed bool
}

// Lease is a claimed one-shot. Token is the fencing token: only the holder of
// the current token may ack, nack, extend or dead-letter it.
type Lease struct {
	OneShot
	Token int64
	// Until is when the lease expires by the engine's clock.
	Until time.Time
	// ClaimedAt is when Claim handed the lease out, by this process's
	// clock; it is zero on a lease Extend returned. Until a moment after
	// ClaimedAt, the one-shot above is its armed row as the claim found it
	// (re-checking the row then would only repeat the claim's own read).
	ClaimedAt time.Time
	// AgentFailures is how many deliveries in a row found the lease's agent
	// not answering (see Queue.Down) when Claim took it; set by Claim only.
	AgentFailures int
	// InstanceStopped is whether the operator had stopped the one-shot's
	// agent instance when Claim took it (set by Claim only), so that a
	// deliverer in the same process as NAS needs no read of its own to drop
	// the fire of a stopped instance.
	InstanceStopped bool
}

// DeadLetter is a fire the relay gave up on.
type DeadLetter struct {
	OneShot
	Reason   string
	FailedAt time.Time
}

// Errors of engines.
var (
	// ErrQuotaExceeded: the agent's armed quota is full.
	ErrQuotaExceeded = errors.New("relay: armed quota exceeded")
	// ErrLeaseLost: the fencing token is no longer current (expired and
	// reclaimed, acked, or the one-shot was cancelled or re-armed).
	ErrLeaseLost = errors.New("relay: lease lost")
	// ErrNotFound: no such one-shot or dead letter.
	ErrNotFound = errors.New("relay: not found")
	// ErrInvalidCursor: a list cursor the engine did not issue for this listing.
	ErrInvalidCursor = errors.New("relay: invalid cursor")
)

// Armed is the part of an engine the NAS API uses: the armed rows of agents.
type Armed interface {
	// Arm upserts the one-shot of (AgentID, JobID) and its due entry in one
	// atomic step: the same FireAt instant and Flex again is a no-op
	// returning the existing schedule id (it only follows a new callback
	// URL, instance or spelling, and takes the arm's cron key); a different
	// FireAt or Flex replaces it under req.ScheduleID. The row keeps the
	// cron key ArmKey picks; leases and dead letters carry it.
	Arm(ctx context.Context, req ArmRequest) (ArmResult, error)
	// Cancel removes the one-shot of (agentID, jobID) and its due entry; it
	// reports whether there was one. A cancelled one-shot's lease is lost.
	Cancel(ctx context.Context, agentID, jobID string) (bool, error)
	// Get returns the one-shot of (agentID, jobID), or ErrNotFound.
	Get(ctx context.Context, agentID, jobID string) (OneShot, error)
	// List pages agentID's one-shots in job id order; cursor "" starts, a
	// returned next cursor "" means the last page.
	List(ctx context.Context, agentID, cursor string, limit int) (items []OneShot, next string, err error)
	// ListFailed returns up to max (<= 0: FailedFeedCap) of agentID's failed
	// fires, oldest first: its one-shots that were dead-lettered no longer
	// than keep ago by the engine's clock (keep <= 0: any time), are still in
	// the dead letter (not replayed) and that the agent has not acknowledged
	// with AckFailed. Reading consumes nothing; fires older than keep are
	// forgotten. A fire dead-lettered again after a replay is listed again.
	ListFailed(ctx context.Context, agentID string, keep time.Duration, max int) ([]DeadLetter, error)
	// AckFailed forgets agentID's failed fires with the given schedule ids
	// (they stay in the dead letter) and reports how many of them ListFailed
	// with the same keep would have returned; other ids (unknown, of another
	// agent, replayed, expired, acknowledged before) are ignored.
	AckFailed(ctx context.Context, agentID string, keep time.Duration, scheduleIDs []string) (int, error)
}

// FailedFeedCap bounds an agent's failed-fire feed: beyond it the oldest
// entries fall off (they stay in the dead letter).
const FailedFeedCap = 10000

// Queue is the part of an engine dispatchers use. Lease expiry is judged by
// the engine's clock, never the caller's.
type Queue interface {
	// Claim leases up to max one-shots whose due time has come (never
	// before), each for leaseFor, incrementing the attempt/fencing token,
	// under flow control (see Flow): a due fire whose agent has no room is
	// held in the store instead, and a claim leases no more of one agent's
	// fires than its room. When it leases a fire of agent A, A's other
	// fires whose flexible window has opened (FireAt <= now) are made due
	// now, so that they go out in the same wake. A claim that fails part
	// way returns the leases it took with the error: they are the caller's
	// to deliver like any other.
	Claim(ctx context.Context, max int, leaseFor time.Duration, flow Flow) ([]Lease, error)
	// NextDue returns how long until the earliest armed entry is due by the
	// engine's clock (0 if already due), or ok=false when nothing is armed;
	// the gate of an agent with held fires counts as a due time.
	NextDue(ctx context.Context) (wait time.Duration, ok bool, err error)
	// Wake returns a channel that is closed (every holder wakes) at the next
	// event that may have made an entry due earlier: an arm, a nack, a
	// replay or a reap, in this process or, on a shared store, in another.
	// Take it before NextDue, so that an event in between is not missed.
	// It is best effort: dispatchers also re-check NextDue periodically.
	Wake() <-chan struct{}
	// Extend renews a lease for leaseFor from now.
	Extend(ctx context.Context, l Lease, leaseFor time.Duration) (Lease, error)
	// Ack finishes a delivered one-shot: it and its armed row are removed,
	// and the agent, answering again, stops probing.
	Ack(ctx context.Context, l Lease) error
	// Nack returns the one-shot to armed, due again after delay, recording reason.
	Nack(ctx context.Context, l Lease, delay time.Duration, reason string) error
	// Down is Nack for a delivery that found the agent not answering
	// (refused, timed out, waking): the one-shot is due again after delay,
	// none of the agent's fires is claimed for hold, and after that they go
	// out one at a time (a probe) until a delivery of the agent is acked.
	// The agent's failure count becomes l.AgentFailures+1 (or stays, if
	// higher).
	Down(ctx context.Context, l Lease, delay, hold time.Duration, reason string) error
	// Kill moves the one-shot to the dead letter with reason (its armed row
	// goes away; the agent learns of it through ListFailed).
	Kill(ctx context.Context, l Lease, reason string) error
	// Reap returns one-shots whose lease expired to armed, due now; it
	// reports how many.
	Reap(ctx context.Context) (int, error)
}

// DeadLetters is the operator's view of the dead letter.
type DeadLetters interface {
	// ListDead pages dead letters, optionally of one agent, newest first.
	ListDead(ctx context.Context, agentID, cursor string, limit int) (items []DeadLetter, next string, err error)
	// Replay re-arms dead-lettered one-shots, due now, with attempts reset,
	// and reports what it did with each. An entry whose job was armed again
	// after its fire died leaves the dead letter without being re-armed (the
	// newer fire stands), reported in Dropped with ReplayDropRearmed. When
	// some ids name no dead letter, Replay replays nothing and returns an
	// *UnknownDeadLettersError naming them. An id given twice counts once.
	Replay(ctx context.Context, scheduleIDs []string) (ReplayResult, error)
	// ReplayAgent replays all of one agent's dead letters as Replay does;
	// an agent with none replays nothing (no error).
	ReplayAgent(ctx context.Context, agentID string) (ReplayResult, error)
}

// ReplayResult is what a replay did with the dead letters it took.
type ReplayResult struct {
	// Replayed are the dead letters re-armed, due now, attempts reset.
	Replayed []DeadLetter
	// Dropped are the dead letters taken out without being re-armed, each
	// with the reason.
	Dropped []DroppedDeadLetter
	// Missing are schedule ids that were in the dead letter when Replay
	// checked them but no longer when it reached them: another replay took
	// them meanwhile. Only an engine that cannot check and replay in one
	// step (Redis, across shards) reports any.
	Missing []string
}

// DroppedDeadLetter is a dead letter a replay removed without re-arming it.
type DroppedDeadLetter struct {
	DeadLetter
	// Reason is why, one of the ReplayDrop constants.
	Reason string
}

// Reasons a replay drops a dead letter instead of re-arming it.
const (
	// ReplayDropRearmed: the job was armed again after the fire died (its
	// agent moved on to a later slot), so re-arming the dead fire would
	// replace the newer one.
	ReplayDropRearmed = "job_armed_again"
)

// UnknownDeadLettersError is Replay's error for schedule ids that name no
// dead letter: nothing was replayed. It matches ErrNotFound.
type UnknownDeadLettersError struct {
	ScheduleIDs []string
}

// Error implements error.
func (e *UnknownDeadLettersError) Error() string {
	return fmt.Sprintf("relay: no dead letter has schedule id %s", strings.Join(e.ScheduleIDs, ", "))
}

// Is makes errors.Is(err, ErrNotFound) hold.
func (e *UnknownDeadLettersError) Is(target error) bool { return target == ErrNotFound }

// UniqueIDs returns ids without repeats, in their first order.
func UniqueIDs(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// InstanceState is whether an operator let an agent instance run or stopped
// it.
type InstanceState string

// States of an agent instance.
const (
	// InstanceRunning is an instance whose fires are delivered (the state of
	// every instance never stopped).
	InstanceRunning InstanceState = "running"
	// InstanceStopped is an instance whose fires are dropped, not retried.
	InstanceStopped InstanceState = "stopped"
)

// Check returns an error unless s is InstanceRunning or InstanceStopped.
func (s InstanceState) Check() error {
	switch s {
	case InstanceRunning, InstanceStopped:
		return nil
	}
	return fmt.Errorf("relay: unknown instance state %q", string(s))
}

// Control holds small shared facts NAS processes agree on through the engine.
type Control interface {
	// SetInstanceState stops (InstanceStopped) or starts (InstanceRunning)
	// an agent instance: fires of a stopped instance are dropped, not
	// retried. Any other state is refused and changes nothing.
	SetInstanceState(ctx context.Context, instanceID string, state InstanceState) error
	// InstanceStopped reports whether SetInstanceState stopped instanceID.
	InstanceStopped(ctx context.Context, instanceID string) (bool, error)
	// FirstDelivery records a delivery id and reports whether it is the first
	// time it is seen (within ttl).
	FirstDelivery(ctx context.Context, deliveryID string, ttl time.Duration) (bool, error)
	// CancelAgent removes every one-shot of agentID; it reports how many.
	CancelAgent(ctx context.Context, agentID string) (int, error)
	// RaiseRekeyFloor retires agentID's cron keys minted before at (an
	// operator's re-key, chronos agent rekey): NAS mints a new key when it
	// next arms each of the agent's direct jobs. The floor only moves
	// forward (an earlier at changes nothing); it returns the floor in
	// force, which CancelAgent leaves as it is.
	RaiseRekeyFloor(ctx context.Context, agentID string, at time.Time) (time.Time, error)
	// RekeyFloor returns agentID's rekey floor, zero when it was never
	// re-keyed.
	RekeyFloor(ctx context.Context, agentID string) (time.Time, error)
}

// DeliveryLookup is an optional fast path of an engine for NAS's relay
// route. LookupDelivery does what FirstDelivery(deliveryID, ttl) followed,
// for a first delivery, by Get(agentID, jobID) and InstanceStopped of the
// row's instance do, in as few round trips as the engine can: an engine on a
// server implements it so a fire costs one round trip there, not three.
type DeliveryLookup interface {
	LookupDelivery(ctx context.Context, deliveryID string, ttl time.Duration, agentID, jobID string) (DeliveryInfo, error)
}

// DeliveryInfo is what LookupDelivery found.
type DeliveryInfo struct {
	// First is FirstDelivery's answer; the other fields are set only when
	// it is true.
	First bool
	// Found says whether (agentID, jobID) is armed; Row is its one-shot.
	Found bool
	Row   OneShot
	// Stopped says whether the row's instance is stopped (when Found).
	Stopped bool
}

// Stats are gauges for metrics.
type Stats struct {
	Armed      int64 // one-shots armed or leased
	Due        int64 // armed one-shots already due (backlog)
	Leased     int64 // one-shots under a lease
	DeadLetter int64
	Held       int64 // due one-shots held back by flow control
	Probing    int64 // agents probed because they did not answer
}

// Engine is everything a relay store provides.
type Engine interface {
	Armed
	Queue
	DeadLetters
	Control
	LastFires
	Instances
	Flows
	// Stats reads the gauges of the whole store.
	Stats(ctx context.Context) (Stats, error)
	// Close stops the engine's goroutines and closes the connections it opened.
	Close() error
}
