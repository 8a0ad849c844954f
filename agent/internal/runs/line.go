package runs

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
)

// Trigger says why a run was started (package agent's Trigger).
type Trigger string

// Triggers.
const (
	Scheduled Trigger = "scheduled"
	Manual    Trigger = "manual"
	Retry     Trigger = "retry"
	CatchUp   Trigger = "catch_up"
)

// Start asks for the start of a claimed run.
type Start struct {
	Job   job.Job
	Claim job.Claim
	// Announced is set once the run's running line is written, with the
	// lines of the plan that started it.
	Announced bool
}

// Mark is what a ledger line says about one run of a job.
type Mark struct {
	RunID  string
	State  ledger.State
	Slot   time.Time
	Trig   Trigger
	Reason string
}

// Lines builds the ledger lines of runs owned by Owner.
type Lines struct {
	// Owner is this process's owner string (host:pid:uuid).
	Owner string
}

// Entry builds the ledger line m of job j, written at now.
func (l Lines) Entry(j *job.Job, now time.Time, m Mark) ledger.Entry {
	return ledger.Entry{
		Time:       now.UTC(),
		RunID:      m.RunID,
		JobID:      j.ID,
		State:      m.State,
		Slot:       m.Slot.UTC(),
		Trigger:    string(m.Trig),
		Attempt:    1,
		LatenessMS: now.Sub(m.Slot).Milliseconds(),
		Reason:     m.Reason,
		Owner:      l.Owner,
		Runner:     j.Payload.Kind,
		Role:       KindRole(j),
		Chain:      ChainRef(j),
	}
}

// Running is the ledger line of s's run starting, at now.
func (l Lines) Running(s Start, now time.Time) ledger.Entry {
	c := s.Claim
	e := l.Entry(&s.Job, now, Mark{c.RunID, ledger.StateRunning, c.Slot, Trigger(c.Trigger), ""})
	e.Token, e.Attempt, e.Forced, e.Output = c.Token, c.Attempt, c.Forced, OutputRel(s.Job.ID, c.RunID)
	return e
}

// KindRole is the ledger role of j's own runs: parent for a fanout.
func KindRole(j *job.Job) string {
	if j.JobKind == job.JobKindFanout {
		return ledger.RoleParent
	}
	return ""
}

// ChainRef names j's chain and place on the lines of its runs (nil for a
// job outside chains).
func ChainRef(j *job.Job) *ledger.ChainRef {
	if j.Chain == nil {
		return nil
	}
	m := j.Chain
	return &ledger.ChainRef{ID: m.ChainID, Class: m.ChainClass, Stage: m.Stage, Depth: m.Depth, Attempt: m.Attempt}
}

// OutputRel is the path of a run's output file, relative to the home.
func OutputRel(jobID, runID string) string {
	return filepath.Join("output", jobID, runID+".log")
}

// NewID returns a sortable, unique run id: UTC time then random hex.
func NewID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "r" + now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// MissedID is the run id of a missed slot: fixed per job and slot, so
// recording it twice is detectable.
func MissedID(jobID string, slot time.Time) string {
	return "m" + slot.UTC().Format("20060102T150405") + "-" + jobID
}

// PausedID names the record of slot skipped while job jobID was paused;
// one per slot, also across processes.
func PausedID(jobID string, slot time.Time) string {
	return "p" + slot.UTC().Format("20060102T150405") + "-" + jobID
}
