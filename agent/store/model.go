package store

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// FormatVersion is the version of jobs.json this package writes. A file with
// a newer version is refused rather than rewritten. Version 2 homes may hold
// records in jobs.journal that readers must apply after jobs.json: builds
// that read only version 1 (and would miss them) refuse such a home.
const FormatVersion = 2

// jobIDPattern is the job id syntax of the wire contract.
var jobIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidJobID reports whether id may be used as a job id: the wire
// contract's syntax, except "." and "..", which would name a directory other
// than the job's own under output/.
func ValidJobID(id string) error {
	if !jobIDPattern.MatchString(id) {
		return fmt.Errorf("job id %q must match %s", id, jobIDPattern)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("job id %q names a directory; use a name with a letter or digit", id)
	}
	return nil
}

// Duration is a time.Duration written in JSON as a Go duration string ("90s").
type Duration time.Duration

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration: %w", err)
		}
		*d = Duration(n)
		return nil
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

// Misfire is what happens to slots found overdue (beyond the grace window)
// when the agent starts or wakes.
type Misfire string

// Misfire policies.
const (
	// MisfireRunOnce runs once now for the latest overdue slot and records the
	// others missed (the default).
	MisfireRunOnce Misfire = "run_once"
	// MisfireSkip records every overdue slot missed and waits for the next.
	MisfireSkip Misfire = "skip"
	// MisfireRunAll runs every overdue slot in turn, up to a bound; slots
	// beyond the bound are recorded missed.
	MisfireRunAll Misfire = "run_all"
)

// Overlap is what happens when a slot comes while a run of the same job is
// still in progress.
type Overlap string

// Overlap policies.
const (
	// OverlapSkip records the new slot skipped (the default).
	OverlapSkip Overlap = "skip"
	// OverlapQueueOne keeps the newest slot waiting and runs it when the
	// current run ends; an older waiting slot is recorded skipped.
	OverlapQueueOne Overlap = "queue_one"
	// OverlapAllow runs the new slot beside the old one.
	OverlapAllow Overlap = "allow"
	// OverlapReplace stops the current run (recorded interrupted) and runs
	// the new slot.
	OverlapReplace Overlap = "replace"
)

// Window is the idempotency window: a run that succeeded in the current
// window blocks another (recorded skipped) unless forced.
type Window string

// Idempotency windows, computed in the job's zone.
const (
	WindowNone   Window = "none"
	WindowHourly Window = "hourly"
	WindowDaily  Window = "daily"
	WindowWeekly Window = "weekly"
)

// OnInterrupt is what happens to a run whose owner died mid-run.
type OnInterrupt string

// Interrupt policies.
const (
	// InterruptRecord records the run interrupted and does not run the slot
	// again: at most once (the default).
	InterruptRecord OnInterrupt = "record"
	// InterruptRetry runs the slot again with a new fencing token, up to the
	// retry policy's attempts with backoff: at least once.
	InterruptRetry OnInterrupt = "retry"
)

// Job statuses kept in LastStatus (the outcome of the last finished run).
const (
	StatusSucceeded   = "succeeded"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
)

// ParseMisfire validates a misfire policy name ("" is the default).
func ParseMisfire(s string) (Misfire, error) {
	switch m := Misfire(strings.TrimSpace(s)); m {
	case "":
		return MisfireRunOnce, nil
	case MisfireRunOnce, MisfireSkip, MisfireRunAll:
		return m, nil
	}
	return "", fmt.Errorf("misfire %q must be one of run_once, skip, run_all", s)
}

// ParseOverlap validates an overlap policy name ("" is the default).
func ParseOverlap(s string) (Overlap, error) {
	switch o := Overlap(strings.TrimSpace(s)); o {
	case "":
		return OverlapSkip, nil
	case OverlapSkip, OverlapQueueOne, OverlapAllow, OverlapReplace:
		return o, nil
	}
	return "", fmt.Errorf("overlap %q must be one of skip, queue_one, allow, replace", s)
}

// ParseWindow validates an idempotency window name ("" is none).
func ParseWindow(s string) (Window, error) {
	switch w := Window(strings.TrimSpace(s)); w {
	case "":
		return WindowNone, nil
	case WindowNone, WindowHourly, WindowDaily, WindowWeekly:
		return w, nil
	}
	return "", fmt.Errorf("window %q must be one of none, hourly, daily, weekly", s)
}

// ParseOnInterrupt validates an interrupt policy name ("" is record).
func ParseOnInterrupt(s string) (OnInterrupt, error) {
	switch o := OnInterrupt(strings.TrimSpace(s)); o {
	case "":
		return InterruptRecord, nil
	case InterruptRecord, InterruptRetry:
		return o, nil
	}
	return "", fmt.Errorf("on-interrupt %q must be one of record, retry", s)
}

// Repeat bounds how many runs a recurring job makes. Times 0 is unbounded.
// Completed counts the slots claimed so far.
type Repeat struct {
	Times     int `json:"times,omitempty"`
	Completed int `json:"completed"`
}

// Retry bounds re-runs of an interrupted slot under on_interrupt retry:
// at most MaxAttempts attempts in all, waiting Backoff, doubling up to
// MaxBackoff, between them.
type Retry struct {
	MaxAttempts int      `json:"max_attempts,omitempty"`
	Backoff     Duration `json:"backoff,omitempty"`
	MaxBackoff  Duration `json:"max_backoff,omitempty"`
}

// Claim is one live run of a job: who owns it, its fencing token and lease.
type Claim struct {
	RunID      string    `json:"run_id"`
	Slot       time.Time `json:"slot"`
	Trigger    string    `json:"trigger"`
	Attempt    int       `json:"attempt"`
	Owner      string    `json:"owner"`
	Token      uint64    `json:"token"`
	LeaseUntil time.Time `json:"lease_until"`
	ClaimedAt  time.Time `json:"claimed_at"`
	Forced     bool      `json:"forced,omitempty"`
	// OwnerBoot, OwnerNS and OwnerStart tie the owner to one process beyond
	// its pid: the kernel's boot id, the owner's pid namespace and its
	// start time (clock ticks since boot). Claims written without them are
	// judged by pid and lease alone.
	OwnerBoot  string `json:"owner_boot,omitempty"`
	OwnerNS    string `json:"owner_ns,omitempty"`
	OwnerStart uint64 `json:"owner_start,omitempty"`
	// Cancel asks the run's owner to stop the run and record it cancelled
	// (runs cancel).
	Cancel bool `json:"cancel,omitempty"`
	// CancelReason is the reason given with the cancel request, if any.
	CancelReason string `json:"cancel_reason,omitempty"`
	// Procs are the run's long-lived processes as last recorded by its
	// owner (the process group leader first), each with its start time, so
	// that when the owner dies another agent on the host can kill exactly
	// what is left of the run.
	Procs []runner.Process `json:"procs,omitempty"`
}

// Pending is a run owed but not yet started: a slot queued behind a running
// one (overlap queue_one), a catch-up slot (misfire run_all) or a retry of an
// interrupted run. NotBefore delays it (retry backoff).
type Pending struct {
	RunID     string    `json:"run_id"`
	Slot      time.Time `json:"slot"`
	Trigger   string    `json:"trigger"`
	Attempt   int       `json:"attempt"`
	NotBefore time.Time `json:"not_before,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	Forced    bool      `json:"forced,omitempty"`
	// Cause is why the run is owed: PendingQueued, PendingCatchUp or
	// PendingRetry.
	Cause string `json:"cause"`
}

// Causes of a pending run.
const (
	PendingQueued  = "queued"
	PendingCatchUp = "catch_up"
	PendingRetry   = "retry"
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

// ClaimIndex returns the index of the claim with run id, or -1.
func (j *Job) ClaimIndex(runID string) int {
	for i := range j.Claims {
		if j.Claims[i].RunID == runID {
			return i
		}
	}
	return -1
}

// State is the decoded jobs.json, handed to View and Update callbacks.
//
// Jobs are reached through Job, All and Add, which also tell the store which
// jobs a callback may have changed: only those are re-encoded when the file
// is written.
type State struct {
	// Version is the file format version.
	Version int
	// Generation counts the changes written (to jobs.json or as records);
	// it only grows.
	Generation uint64

	jobs     []*Job
	index    map[string]int
	dirty    map[*Job]bool
	allDirty bool
	reshaped bool // jobs added or removed

	chains chainSet // the chains and class breakers, beside the jobs
}

// fileState is the JSON form of State.
type fileState struct {
	Version    int    `json:"version"`
	Generation uint64 `json:"generation"`
	Jobs       []*Job `json:"jobs"`
	// Chains and Breakers are written on the closing line, and only when
	// there are any, so a file without chains keeps its old layout.
	Chains   []*chain.Chain   `json:"chains,omitempty"`
	Breakers []*chain.Breaker `json:"chain_breakers,omitempty"`
}

// Job returns the job with id for reading or changing, or nil.
func (s *State) Job(id string) *Job {
	if s.index == nil {
		s.reindex()
	}
	i, ok := s.index[id]
	if !ok || i >= len(s.jobs) || s.jobs[i].ID != id {
		return nil
	}
	j := s.jobs[i]
	s.touch(j)
	return j
}

// All returns every job, ordered by id, for reading or changing.
func (s *State) All() []*Job {
	s.allDirty = true
	return s.jobs
}

// Len returns the number of jobs.
func (s *State) Len() int { return len(s.jobs) }

// Add appends a job; an existing id is an error.
func (s *State) Add(j *Job) error {
	if s.index == nil {
		s.reindex()
	}
	if _, ok := s.index[j.ID]; ok {
		return fmt.Errorf("%w: %q", ErrExists, j.ID)
	}
	s.jobs = append(s.jobs, j)
	s.index[j.ID] = len(s.jobs) - 1
	s.touch(j)
	s.reshaped = true
	return nil
}

// Remove deletes the job with id and reports whether it existed.
func (s *State) Remove(id string) bool {
	if s.Job(id) == nil {
		return false
	}
	i := s.index[id]
	s.jobs = append(s.jobs[:i], s.jobs[i+1:]...)
	s.reindex()
	s.reshaped = true
	return true
}

func (s *State) touch(j *Job) {
	if s.dirty == nil {
		s.dirty = map[*Job]bool{}
	}
	s.dirty[j] = true
}

func (s *State) clean() {
	s.dirty, s.allDirty, s.reshaped = nil, false, false
	s.chains.dirty, s.chains.reshaped = false, false
}

func (s *State) reindex() {
	s.index = make(map[string]int, len(s.jobs))
	for i, j := range s.jobs {
		s.index[j.ID] = i
	}
}
