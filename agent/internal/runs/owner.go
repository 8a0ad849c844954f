package runs

import (
	"errors"
	"io/fs"
	"os"

	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/agent/job"
)

// Liveness is what can be said about a claim's owner.
type Liveness int

// Liveness values.
const (
	// OwnerUnknown: another host, or a live pid the claim cannot tie to its
	// owner (no start time recorded); the lease decides.
	OwnerUnknown Liveness = iota
	// OwnerSelf: the owner is the asking process.
	OwnerSelf
	// OwnerGone: same host and the owner is provably gone.
	OwnerGone
	// OwnerAlive: same host and the owner provably runs: its pid is alive
	// and started when the claim says. Its claims are never taken over,
	// whatever their lease says (a live owner whose store is not writable
	// cannot renew it).
	OwnerAlive
)

// String names the liveness (for logs).
func (l Liveness) String() string {
	switch l {
	case OwnerSelf:
		return "self"
	case OwnerGone:
		return "gone"
	case OwnerAlive:
		return "alive"
	}
	return "unknown"
}

// Where tells where the asking process runs: the kernel's boot id and its
// pid namespace ("" when unknown).
type Where struct {
	Boot string
	NS   string
}

// Judge tells what can be said about the owner of claim c, asked by the
// process self running at where. On the same host the owner is gone when
// the claim was written in an earlier boot, when its pid is self's under
// another uuid (an earlier life of this pid), when the pid is not alive, or
// when the pid runs a process that started at another time than the
// claim's owner (the pid was reused); it is alive when the pid runs the
// process that started when the claim says. Otherwise (another host,
// another pid namespace, or a claim without the owner's start time) it is
// unknown, and the lease decides.
func Judge(c job.Claim, self job.Owner, where Where) Liveness {
	o, err := job.ParseOwner(c.Owner)
	if err != nil {
		return OwnerUnknown
	}
	if o == self {
		return OwnerSelf
	}
	if o.Host != self.Host {
		return OwnerUnknown
	}
	if c.OwnerBoot != "" && where.Boot != "" && c.OwnerBoot != where.Boot {
		return OwnerGone
	}
	if c.OwnerNS != "" && where.NS != "" && c.OwnerNS != where.NS {
		// Its pids are not ours to look at (a container sharing the
		// host name).
		return OwnerUnknown
	}
	if o.PID == self.PID {
		// Same pid, other uuid: an earlier life of this pid.
		return OwnerGone
	}
	if !procfs.Alive(o.PID) {
		return OwnerGone
	}
	if c.OwnerStart == 0 || c.OwnerBoot == "" || c.OwnerBoot != where.Boot || c.OwnerNS != where.NS {
		return OwnerUnknown
	}
	st, err := procfs.Read(o.PID)
	switch {
	case errors.Is(err, fs.ErrNotExist), err == nil && st.Dead():
		return OwnerGone
	case err != nil:
		return OwnerUnknown
	case st.Start != c.OwnerStart:
		return OwnerGone
	}
	return OwnerAlive
}

// Hostname returns the host name used in owners ("localhost" when unknown).
func Hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}
