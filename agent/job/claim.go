package job

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/runner"
)

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

// Owner names the process holding a claim: "host:pid:uuid". The uuid tells
// two lives of the same pid apart.
type Owner struct {
	Host string
	PID  int
	ID   string
}

// String formats the owner as host:pid:uuid.
func (o Owner) String() string { return fmt.Sprintf("%s:%d:%s", o.Host, o.PID, o.ID) }

// ParseOwner reads host:pid:uuid (the host may itself contain colons).
func ParseOwner(s string) (Owner, error) {
	last := strings.LastIndexByte(s, ':')
	if last <= 0 {
		return Owner{}, fmt.Errorf("owner %q is not host:pid:uuid", s)
	}
	mid := strings.LastIndexByte(s[:last], ':')
	if mid < 0 {
		return Owner{}, fmt.Errorf("owner %q is not host:pid:uuid", s)
	}
	pid, err := strconv.Atoi(s[mid+1 : last])
	if err != nil || pid <= 0 {
		return Owner{}, fmt.Errorf("owner %q has a bad pid", s)
	}
	return Owner{Host: s[:mid], PID: pid, ID: s[last+1:]}, nil
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

// ClaimSlot is the compare-and-set at the heart of the agent: it succeeds
// only if the job's next_run_at equals slot, and then records the claim with
// the next fencing token. It does not advance next_run_at; the caller does,
// in the same store update.
func (j *Job) ClaimSlot(slot time.Time, c Claim) (Claim, bool) {
	if j.NextRunAt == nil || !j.NextRunAt.Equal(slot) {
		return Claim{}, false
	}
	return j.AddClaim(c), true
}

// AddClaim records c with the next fencing token and returns it.
func (j *Job) AddClaim(c Claim) Claim {
	j.Fence++
	c.Token = j.Fence
	j.Claims = append(j.Claims, c)
	return c
}

// DropClaim removes the claim with run id and token; it reports whether that
// claim was still held (false: the lease was lost or the run replaced).
func (j *Job) DropClaim(runID string, token uint64) bool {
	i := j.ClaimIndex(runID)
	if i < 0 || j.Claims[i].Token != token {
		return false
	}
	j.Claims = append(j.Claims[:i], j.Claims[i+1:]...)
	return true
}
