package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// Liveness is what can be said about a claim's owner.
type Liveness int

// Liveness values.
const (
	// OwnerUnknown: another host, or a live pid that may have been reused;
	// the lease decides.
	OwnerUnknown Liveness = iota
	// OwnerSelf: the owner is the asking process.
	OwnerSelf
	// OwnerGone: same host and the process is provably gone.
	OwnerGone
)

// Judge tells whether the owner of a claim is the asking process (self), is
// provably gone (same host, and the pid is not alive or belongs to the
// asking process under another uuid), or unknown.
func Judge(owner string, self Owner) Liveness {
	o, err := ParseOwner(owner)
	if err != nil {
		return OwnerUnknown
	}
	if o == self {
		return OwnerSelf
	}
	if o.Host != self.Host {
		return OwnerUnknown
	}
	if o.PID == self.PID {
		// Same pid, other uuid: an earlier life of this pid.
		return OwnerGone
	}
	if !pidAlive(o.PID) {
		return OwnerGone
	}
	return OwnerUnknown
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err == nil || errors.Is(err, syscall.EPERM) {
		return true
	}
	if errors.Is(err, syscall.ESRCH) {
		return false
	}
	// Be conservative: anything else leaves it to the lease.
	return true
}

// Hostname returns the host name used in owners ("localhost" when unknown).
func Hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// ClaimSlot is the compare-and-set at the heart of the agent: it succeeds
// only if the job's next_run_at equals slot, and then records the claim with
// the next fencing token. It does not advance next_run_at; the caller does,
// in the same Update.
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
