package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

// Files in the agent's home directory.
const (
	// StateFile holds the last reconcile, counters, recent errors, the
	// desired and armed sets as last seen, and the serving agent's health.
	StateFile = "provider.json"
	// stateLock serialises reconciles and state writes across processes.
	stateLock = "provider.lock"
	// maxErrors is how many recent errors the state keeps.
	maxErrors = 20
	// maxPendingMissed bounds the failed fires kept for a later retry.
	maxPendingMissed = 1000
)

// Arm is one armed (or desired) one-shot.
type Arm struct {
	JobID       string    `json:"job_id"`
	FireAt      time.Time `json:"fire_at"`
	ScheduleID  string    `json:"schedule_id,omitempty"`
	CallbackURL string    `json:"callback_url,omitempty"`
	// FlexSeconds is the fire's flexible window (contract's flex_seconds);
	// 0: none. In the state's armed set it is the window last provisioned
	// for the fire, kept when NAS does not list flex_seconds back.
	FlexSeconds int64 `json:"flex_seconds,omitempty"`
	// Delivery is "direct" for a fire armed (or wanted) for direct
	// delivery; empty for NAS-mediated delivery. The key is never here.
	Delivery string `json:"delivery,omitempty"`
}

// Result is the outcome of one reconcile.
type Result struct {
	// At is when it started; DurationMS how long it took.
	At         time.Time `json:"at"`
	DurationMS int64     `json:"duration_ms"`
	// By names the process that ran it ("agent" or "cli").
	By string `json:"by"`
	// OK is true when every step succeeded; Error joins the failures.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Desired and Armed count the sets after the reconcile.
	Desired int `json:"desired"`
	Armed   int `json:"armed"`
	// Provisioned, Cancelled and Delivering list job ids: armed or re-armed,
	// disarmed, and left alone because NAS is delivering the slot the job
	// waits for.
	Provisioned []string `json:"provisioned,omitempty"`
	Cancelled   []string `json:"cancelled,omitempty"`
	Delivering  []string `json:"delivering,omitempty"`
	// MissedRecorded counts failed fires written to the ledger.
	MissedRecorded int `json:"missed_recorded,omitempty"`
	// CaughtUp is true when overdue slots were handed to the misfire policy.
	CaughtUp bool `json:"caught_up,omitempty"`
}

// Counts are running totals across reconciles (of every process).
type Counts struct {
	Reconciles     int `json:"reconciles"`
	Failures       int `json:"failures"`
	Provisioned    int `json:"provisioned"`
	Cancelled      int `json:"cancelled"`
	MissedRecorded int `json:"missed_recorded"`
}

// ErrorEntry is one failed step.
type ErrorEntry struct {
	At    time.Time `json:"at"`
	Op    string    `json:"op"`
	JobID string    `json:"job_id,omitempty"`
	Error string    `json:"error"`
}

// AgentState is what the serving agent reports about itself.
type AgentState struct {
	PID       int              `json:"pid"`
	Provider  string           `json:"provider"`
	Why       string           `json:"why"`
	Listen    string           `json:"listen,omitempty"`
	StartedAt time.Time        `json:"started_at"`
	UpdatedAt time.Time        `json:"updated_at"`
	StoppedAt *time.Time       `json:"stopped_at,omitempty"`
	JWKS      *fireauth.Health `json:"jwks,omitempty"`
}

// State is the content of StateFile.
type State struct {
	UpdatedAt     time.Time    `json:"updated_at"`
	Last          *Result      `json:"last,omitempty"`
	LastSuccessAt *time.Time   `json:"last_success_at,omitempty"`
	Counts        Counts       `json:"counts"`
	Errors        []ErrorEntry `json:"errors,omitempty"`
	Desired       []Arm        `json:"desired"`
	Armed         []Arm        `json:"armed"`
	// PendingMissed are failed fires NAS reported that could not be written
	// to the ledger yet. Chronos NAS lists them again until they are
	// acknowledged; a NAS of the original contract reports each only once.
	PendingMissed []contract.FailedFire `json:"pending_missed,omitempty"`
	Agent         *AgentState           `json:"agent,omitempty"`
}

func (s *State) addError(now time.Time, op, jobID string, err error) {
	s.Errors = append(s.Errors, ErrorEntry{At: now, Op: op, JobID: jobID, Error: err.Error()})
	if n := len(s.Errors); n > maxErrors {
		s.Errors = append([]ErrorEntry(nil), s.Errors[n-maxErrors:]...)
	}
}

// ErrCorruptState is returned (wrapped) by ReadState for a state file that
// does not decode. UpdateState moves such a file aside and starts afresh: the
// state is a report, never the source of truth.
var ErrCorruptState = errors.New("corrupt state file")

// ReadState reads the state file in home; a missing file is an empty State.
func ReadState(home string) (State, error) {
	var s State
	data, err := os.ReadFile(filepath.Join(home, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("provider: state: %w", err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("provider: state %s: %w: %w", StateFile, ErrCorruptState, err)
	}
	return s, nil
}

// writeState replaces the state file atomically: temp file, fsync, rename,
// directory fsync.
func writeState(home string, s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("provider: state: %w", err)
	}
	if err := atomicfile.Replace(filepath.Join(home, StateFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("provider: state: %w", err)
	}
	return nil
}

// UpdateState applies fn to the state file in home under the cross-process
// lock.
func UpdateState(ctx context.Context, home string, fn func(*State)) error {
	unlock, err := lockFile(ctx, filepath.Join(home, stateLock))
	if err != nil {
		return err
	}
	defer unlock()
	s, err := ReadState(home)
	if errors.Is(err, ErrCorruptState) {
		path := filepath.Join(home, StateFile)
		_ = os.Rename(path, fmt.Sprintf("%s.corrupt-%d", path, time.Now().UnixNano()))
		s, err = State{}, nil
	}
	if err != nil {
		return err
	}
	fn(&s)
	return writeState(home, s)
}
