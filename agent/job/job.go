package job

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// idPattern is the job id syntax of the wire contract.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidID reports whether id may be used as a job id: the wire contract's
// syntax, except "." and "..", which would name a directory other than the
// job's own under output/.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("job id %q must match %s", id, idPattern)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("job id %q names a directory; use a name with a letter or digit", id)
	}
	return nil
}

// Job statuses kept in LastStatus (the outcome of the last finished run).
const (
	StatusSucceeded   = "succeeded"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
)

// Job is one durable job. Schedule is kept as written; the parsed form is
// recomputed from Schedule, Timezone and CreatedAt (the anchor of intervals
// and relative one-shots), so the file stays readable and stable.
type Job struct {
	ID           string         `json:"id"`
	Name         string         `json:"name,omitempty"`
	Schedule     string         `json:"schedule"`
	Kind         string         `json:"kind"`
	Timezone     string         `json:"timezone,omitempty"`
	Enabled      bool           `json:"enabled"`
	PausedReason string         `json:"paused_reason,omitempty"`
	Repeat       Repeat         `json:"repeat"`
	Payload      runner.Payload `json:"payload"`
	Timeout      Duration       `json:"timeout,omitempty"`
	Misfire      Misfire        `json:"misfire"`
	Grace        Duration       `json:"grace,omitempty"`
	Overlap      Overlap        `json:"overlap"`
	Window       Window         `json:"window"`
	OnInterrupt  OnInterrupt    `json:"on_interrupt"`
	Retry        Retry          `json:"retry"`
	// Flex is the job's flexible window: a fire for a slot may be
	// delivered anywhere in [slot, slot + Flex] and runs as that slot.
	// NAS spreads such fires inside their windows. 0 (left out of the
	// file): none, the fire comes at the slot.
	Flex Duration `json:"flex,omitempty"`
	// JobKind is the job kind (JobKindPlain, JobKindWorkflow,
	// JobKindFanout), with its settings in Workflow or Fanout.
	JobKind  string    `json:"job_kind,omitempty"`
	Workflow *Workflow `json:"workflow,omitempty"`
	Fanout   *Fanout   `json:"fanout,omitempty"`

	NextRunAt       *time.Time `json:"next_run_at"`
	LastRunAt       *time.Time `json:"last_run_at,omitempty"`
	LastStatus      string     `json:"last_status,omitempty"`
	LastError       string     `json:"last_error,omitempty"`
	LastRunID       string     `json:"last_run_id,omitempty"`
	LastSuccessAt   *time.Time `json:"last_success_at,omitempty"`
	LastSuccessSlot *time.Time `json:"last_success_slot,omitempty"`
	LastSuccessRun  string     `json:"last_success_run,omitempty"`
	FailureStreak   int        `json:"failure_streak"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
	// FinishedAt is set when a one-shot ran or repeat.times was reached: the
	// job stays as a record with no next_run_at.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// PausedFrom is, while the job is paused, its first slot not yet
	// recorded skipped: the slots that pass while paused are recorded one
	// line each, with reason "paused".
	PausedFrom *time.Time `json:"paused_from,omitempty"`

	// Policy is who hears of the job's runs (keys notify, notify_after,
	// renotify_every).
	notify.Policy
	// NotifyStreak is the failure streak its alerts count.
	NotifyStreak notify.Streak `json:"notify_streak,omitzero"`
	// Outbound are notifications made durable with a run's final state and
	// not yet handed to the outbox.
	Outbound []notify.Notification `json:"outbound,omitempty"`

	// Chain is set on a step of a chain: the chain and the step's place in it.
	Chain *chain.Meta `json:"chain,omitempty"`

	// Fence is the last fencing token handed out for this job; it only grows.
	Fence   uint64    `json:"fence"`
	Claims  []Claim   `json:"claims,omitempty"`
	Pending []Pending `json:"pending,omitempty"`
}

// Clone returns a deep copy of j.
func (j *Job) Clone() Job {
	c := *j
	c.NextRunAt = cloneTime(j.NextRunAt)
	c.LastRunAt = cloneTime(j.LastRunAt)
	c.LastSuccessAt = cloneTime(j.LastSuccessAt)
	c.LastSuccessSlot = cloneTime(j.LastSuccessSlot)
	c.FinishedAt = cloneTime(j.FinishedAt)
	c.PausedFrom = cloneTime(j.PausedFrom)
	c.Claims = append([]Claim(nil), j.Claims...)
	for i := range c.Claims {
		c.Claims[i].Procs = append([]runner.Process(nil), c.Claims[i].Procs...)
	}
	c.Pending = append([]Pending(nil), j.Pending...)
	c.cloneKinds()
	c.Chain = j.Chain.Clone()
	c.Policy = j.Policy.Clone()
	c.Outbound = slices.Clone(j.Outbound)
	for i := range c.Outbound {
		c.Outbound[i] = c.Outbound[i].Clone()
	}
	// Decode into a fresh value: json.Unmarshal reuses the pointers it finds,
	// which would write through into j's payload.
	c.Payload = runner.Payload{}
	b, _ := json.Marshal(j.Payload)
	_ = json.Unmarshal(b, &c.Payload)
	return c
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := *t
	return &v
}
