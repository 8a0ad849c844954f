package relay

import (
	"context"
	"time"
)

// Last-fire outcomes (the wire names of contract.LastFire*).
const (
	LastFireDelivered       = "delivered"
	LastFireInstanceStopped = "instance_stopped"
	LastFireDeadLettered    = "dead_lettered"
)

// LastFire is the final outcome of the last fire of one job of one agent.
// An engine keeps it until the job is armed again under another schedule
// id, the agent cancels the job, or it expires: while it is kept and the job
// has no armed one-shot, the job is unarmed after a fire, which is what NAS
// reports to operators (an agent that died before re-arming) and to the
// agent itself (why a slot never fired).
type LastFire struct {
	AgentID    string
	InstanceID string
	JobID      string
	// ScheduleID and FireAt are the fire's.
	ScheduleID string
	FireAt     time.Time
	// CallbackURL is where the fire was sent.
	CallbackURL string
	// Outcome is one of the LastFire* constants; Reason says more.
	Outcome string
	Reason  string
	// At is when the outcome was known, by the caller's clock.
	At time.Time
}

// UnarmedQuery selects records for LastFires.Unarmed.
type UnarmedQuery struct {
	// AgentID limits the answer to one agent; "" means every agent.
	AgentID string
	// Before selects records whose outcome is at or before it.
	Before time.Time
	// ExpireBefore, when set, drops records whose outcome is before it
	// instead of reporting them.
	ExpireBefore time.Time
	// Max bounds the answer (<= 0: 1000).
	Max int
	// Mark records that the returned records were reported, so that the
	// next query with Mark sets New only on records reported for the first
	// time. Without Mark nothing is marked (an operator's look).
	Mark bool
}

// UnarmedFire is one record an Unarmed query found.
type UnarmedFire struct {
	LastFire
	// New is true (with Mark) the first time a record is reported.
	New bool
}

// LastFires is the part of an engine that remembers the final outcome of
// each job's last fire until the job is armed again. Records are judged
// against the armed rows when read: a record whose job holds a one-shot of
// another schedule id was superseded by a new arm and is dropped then, so
// Arm itself stays as fast as before.
type LastFires interface {
	// RecordLastFire records f as the last fire of (f.AgentID, f.JobID),
	// replacing the previous record.
	RecordLastFire(ctx context.Context, f LastFire) error
	// ForgetLastFire drops the record of (agentID, jobID): the agent
	// cancelled the job, so leaving it unarmed is what it meant.
	ForgetLastFire(ctx context.Context, agentID, jobID string) error
	// LastFiresOf returns agentID's records not superseded by a new arm
	// (the job has no one-shot, or still the one the record is about,
	// waiting for its ack), in job id order. Records before expireBefore
	// (when set) are dropped instead.
	LastFiresOf(ctx context.Context, agentID string, expireBefore time.Time) ([]LastFire, error)
	// Unarmed returns the records q selects whose job holds no one-shot at
	// all, oldest outcome first, and reports whether there were more than
	// q.Max. Superseded records it meets are dropped.
	Unarmed(ctx context.Context, q UnarmedQuery) ([]UnarmedFire, bool, error)
}

// InstanceInfo is what an engine remembers of one agent instance.
type InstanceInfo struct {
	InstanceID string
	// Stopped is the operator's stop (Control.InstanceStopped).
	Stopped bool
	// StoppedAt and StartedAt are the last stop and start NoteInstance
	// recorded (zero when never).
	StoppedAt, StartedAt time.Time
	// CallbackURL is the callback the instance last armed with.
	CallbackURL string
}

// Instances is the part of an engine that remembers, per agent instance,
// when the operator last stopped and started it and where it is called back.
type Instances interface {
	// NoteInstance records that instanceID was stopped (InstanceStopped) or
	// started (InstanceRunning) at at. Any other state is refused.
	NoteInstance(ctx context.Context, instanceID string, state InstanceState, at time.Time) error
	// SetInstanceCallback records the callback URL instanceID arms with.
	SetInstanceCallback(ctx context.Context, instanceID, callbackURL string) error
	// Instance returns what is known of instanceID (a zero InstanceInfo
	// but for the id when nothing is).
	Instance(ctx context.Context, instanceID string) (InstanceInfo, error)
}
