package chain

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/notify"
)

// State is where a chain is in its life.
type State string

// Chain states: idle → armed (start) → active (the first step runs) →
// cooling_down (a taper) → closed; active → closed directly too.
const (
	StateIdle        State = "idle"
	StateArmed       State = "armed"
	StateActive      State = "active"
	StateCoolingDown State = "cooling_down"
	StateClosed      State = "closed"
)

// States lists every chain state in life order.
var States = []State{StateIdle, StateArmed, StateActive, StateCoolingDown, StateClosed}

// ParseState validates a state name.
func ParseState(s string) (State, error) {
	for _, v := range States {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("chain state %q must be one of idle, armed, active, cooling_down, closed", s)
}

// StepStatus is where one step is.
type StepStatus string

// Step statuses. pending and running are open; the others are final.
const (
	StepPending   StepStatus = "pending"
	StepRunning   StepStatus = "running"
	StepSucceeded StepStatus = "succeeded"
	StepFailed    StepStatus = "failed"
	// StepSkipped: the step fired after its chain expired or closed and did
	// not run.
	StepSkipped StepStatus = "skipped"
	// StepCancelled: the chain closed before the step fired; its job was
	// removed (and so cancelled at NAS).
	StepCancelled StepStatus = "cancelled"
	// StepInterrupted: the step's run was interrupted.
	StepInterrupted StepStatus = "interrupted"
)

// Open reports whether the step is still to run or running.
func (s StepStatus) Open() bool { return s == StepPending || s == StepRunning }

// Outcome is how a closed chain ended.
type Outcome string

// Outcomes.
const (
	OutcomeSuccess Outcome = "success"
	OutcomeFailure Outcome = "failure"
)

// Duration is a time.Duration written in JSON as a Go duration string.
type Duration time.Duration

// MarshalJSON writes d as a duration string ("90m0s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Limits are a chain's hard limits.
type Limits struct {
	// MaxDepth bounds a step's depth (the first step has depth 1).
	MaxDepth int `json:"max_depth"`
	// MaxChildren bounds the steps of the chain, the first one included.
	MaxChildren int `json:"max_children"`
	// MaxRetries bounds the retries of one stage: attempts up to
	// 1 + MaxRetries.
	MaxRetries int `json:"max_retries"`
	// Lifetime is how long the chain lives from its start (expires_at).
	Lifetime Duration `json:"lifetime"`
	// MaxConcurrent bounds the open chains of the class.
	MaxConcurrent int `json:"max_concurrent"`
}

// Default limits.
const (
	DefaultMaxDepth        = 4
	DefaultMaxChildren     = 8
	DefaultMaxRetries      = 3
	DefaultLifetime        = 90 * time.Minute
	DefaultMaxConcurrent   = 3
	DefaultBreakerFailures = 3
	DefaultBreakerWindow   = 30 * time.Minute
	DefaultBreakerCooldown = 60 * time.Minute
	DefaultSpawnStorm      = 20
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{MaxDepth: DefaultMaxDepth, MaxChildren: DefaultMaxChildren, MaxRetries: DefaultMaxRetries,
		Lifetime: Duration(DefaultLifetime), MaxConcurrent: DefaultMaxConcurrent}
}

// Transition is one change of a chain's state.
type Transition struct {
	From    State     `json:"from"`
	To      State     `json:"to"`
	At      time.Time `json:"at"`
	Trigger string    `json:"trigger"`
}

// Step is one one-shot job of a chain.
type Step struct {
	// JobID is the step's job id: <chain_id>.<stage>.<depth>.<attempt>.
	JobID   string     `json:"job_id"`
	Stage   string     `json:"stage"`
	Depth   int        `json:"depth"`
	Attempt int        `json:"attempt"`
	Status  StepStatus `json:"status"`
	// RunID names the step's run once it has one.
	RunID string `json:"run_id,omitempty"`
	// SpawnedBy is the job id of the step that spawned this one ("" for the
	// first step).
	SpawnedBy string     `json:"spawned_by,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	FireAt    time.Time  `json:"fire_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// Reason says why a step was skipped or cancelled, or how its run
	// failed.
	Reason string `json:"reason,omitempty"`
	// Output is the run's output file, relative to the agent's home.
	Output string `json:"output,omitempty"`
}

// Chain is one chain: its identity, state, limits, counts and steps.
type Chain struct {
	ID          string       `json:"id"`
	Class       string       `json:"class"`
	State       State        `json:"state"`
	Transitions []Transition `json:"transitions"`
	CreatedAt   time.Time    `json:"created_at"`
	ExpiresAt   time.Time    `json:"expires_at"`
	Limits      Limits       `json:"limits"`
	// Children counts the steps spawned, the first one included.
	Children int `json:"children"`
	// DepthReached is the deepest step's depth.
	DepthReached int `json:"depth_reached"`
	// Attempts is the latest attempt of each stage.
	Attempts map[string]int `json:"attempts"`
	Steps    []Step         `json:"steps"`
	// CoolingUntil is the end of the taper while cooling down.
	CoolingUntil *time.Time `json:"cooling_until,omitempty"`
	ClosedAt     *time.Time `json:"closed_at,omitempty"`
	ClosedReason string     `json:"closed_reason,omitempty"`
	Outcome      Outcome    `json:"outcome,omitempty"`
}

// Clone returns a deep copy of c.
func (c *Chain) Clone() Chain {
	out := *c
	out.Transitions = append([]Transition(nil), c.Transitions...)
	out.Steps = append([]Step(nil), c.Steps...)
	out.Attempts = make(map[string]int, len(c.Attempts))
	for k, v := range c.Attempts {
		out.Attempts[k] = v
	}
	return out
}

// Open reports whether the chain is not closed.
func (c *Chain) Open() bool { return c.State != StateClosed }

// Step returns the step with job id, or nil.
func (c *Chain) Step(jobID string) *Step {
	for i := range c.Steps {
		if c.Steps[i].JobID == jobID {
			return &c.Steps[i]
		}
	}
	return nil
}

// OpenSteps returns the job ids of the pending and running steps.
func (c *Chain) OpenSteps() []string {
	var out []string
	for _, s := range c.Steps {
		if s.Status.Open() {
			out = append(out, s.JobID)
		}
	}
	return out
}

// RunIDs returns the run ids of the chain's steps, oldest first.
func (c *Chain) RunIDs() []string {
	var out []string
	for _, s := range c.Steps {
		if s.RunID != "" {
			out = append(out, s.RunID)
		}
	}
	return out
}

// Meta is the chain metadata a step's job carries.
type Meta struct {
	ChainID     string    `json:"chain_id"`
	ChainClass  string    `json:"chain_class"`
	Stage       string    `json:"stage"`
	Depth       int       `json:"depth"`
	Attempt     int       `json:"attempt"`
	ExpiresAt   time.Time `json:"expires_at"`
	MaxDepth    int       `json:"max_depth"`
	MaxChildren int       `json:"max_children"`
}

// Clone returns a copy of m (nil stays nil).
func (m *Meta) Clone() *Meta {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// BreakerState is a class breaker's state.
type BreakerState string

// Breaker states.
const (
	BreakerClosed BreakerState = "closed"
	BreakerOpen   BreakerState = "open"
)

// Failure is one failed chain the breaker counts.
type Failure struct {
	At      time.Time `json:"at"`
	ChainID string    `json:"chain_id"`
	Reason  string    `json:"reason"`
	RunID   string    `json:"run_id,omitempty"`
}

// Breaker is the circuit breaker of one chain class.
type Breaker struct {
	Class string       `json:"class"`
	State BreakerState `json:"state"`
	// Failures are the consecutive chain failures, oldest first (a success
	// clears them).
	Failures []Failure `json:"failures,omitempty"`
	// Spawns are the times of the class's recent steps, for the spawn
	// storm check (the last minute is kept).
	Spawns   []time.Time `json:"spawns,omitempty"`
	OpenedAt *time.Time  `json:"opened_at,omitempty"`
	ResumeAt *time.Time  `json:"resume_at,omitempty"`
	// Reason says why it opened.
	Reason string `json:"reason,omitempty"`
	// LastRunIDs are the last (up to 3) run ids of the failing chains when
	// it opened.
	LastRunIDs []string `json:"last_run_ids,omitempty"`
	// Openings counts how often it opened.
	Openings int `json:"openings"`
	// Refusals counts the class's refused starts and spawns by reason
	// (see RefusalReason).
	Refusals map[string]int `json:"refusals,omitempty"`
	// Outbound are the alerts of its opening, made durable with it and not
	// yet handed to the notification outbox.
	Outbound []notify.Notification `json:"outbound,omitempty"`
}

// Clone returns a deep copy of b.
func (b *Breaker) Clone() Breaker {
	out := *b
	out.Failures = append([]Failure(nil), b.Failures...)
	out.Spawns = append([]time.Time(nil), b.Spawns...)
	out.LastRunIDs = append([]string(nil), b.LastRunIDs...)
	out.Outbound = append([]notify.Notification(nil), b.Outbound...)
	out.Refusals = make(map[string]int, len(b.Refusals))
	for k, v := range b.Refusals {
		out.Refusals[k] = v
	}
	return out
}
