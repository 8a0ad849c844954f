package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/agent/internal/procfs"
)

// EnvRunID is the environment variable that names the run; every process a
// shell run starts inherits it, which is how a run's processes are found
// even after they left its process group (setsid) and its parent died.
const EnvRunID = "CHRONOS_RUN_ID"

// Process is one process of a run: its pid and its start time in clock
// ticks since boot. Together they tell the process from a later one given
// the same pid, so a record of them can be used to kill exactly the run's
// processes after a restart and never an unrelated one.
type Process struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// maxRecorded caps how many processes of one run are reported for
// recording.
const maxRecorded = 256

// Tree finds the processes of one run on this host. A process belongs to
// the run when it is the run's first process (the leader of its process
// group), a process recorded earlier that is still the same process, a
// member of the leader's process group, a process whose environment names
// the run (EnvRunID), or a descendant of any of these. Only processes
// started after the leader are considered. It is safe for concurrent use.
//
// On systems without /proc a Tree knows only the process group.
type Tree struct {
	runID   string
	root    Process
	ownRoot bool // root is the caller's child, not yet waited for
	self    int

	mu    sync.Mutex
	seen  map[Process]int  // members, with the number of scans that saw them
	other map[Process]bool // processes found not to belong to the run
	last  []Process        // members alive at the last scan
	group bool             // the leader's pid still names the run's group
}

// NewTree returns the tree of run runID, whose first process is root (zero
// when unknown) and whose members recorded so far are known.
func NewTree(runID string, root Process, known []Process) *Tree {
	t := &Tree{runID: runID, root: root, self: os.Getpid(), seen: map[Process]int{}, other: map[Process]bool{}}
	for _, p := range known {
		if p.PID > 0 && p.Start > 0 {
			t.seen[p] = 1
		}
	}
	return t
}

// newChildTree returns the tree of a run whose leader is the caller's
// child, not yet waited for (so its pid cannot be reused meanwhile).
func newChildTree(runID string, root Process) *Tree {
	t := NewTree(runID, root, nil)
	t.ownRoot = root.PID > 0
	return t
}

// Scan looks at every process once and returns the run's members alive
// now, the leader first, then by pid.
func (t *Tree) Scan() ([]Process, error) {
	stats, err := procfs.All()
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// The leader's pid names the run's process group only while that pid is
	// not another process's: a live process with the leader's pid and
	// another start time means the group is gone and the number reused.
	groupOurs := t.root.PID > 0
	children := make(map[int][]procfs.Stat, len(stats))
	for _, s := range stats {
		if s.PID == t.root.PID && t.root.Start != 0 && s.Start != t.root.Start {
			groupOurs = false
		}
		children[s.PPID] = append(children[s.PPID], s)
	}
	envKV := EnvRunID + "=" + t.runID
	member := map[int]Process{}
	other := make(map[Process]bool, len(t.other))
	for _, s := range stats {
		if s.Dead() || s.PID == t.self {
			continue
		}
		p := Process{PID: s.PID, Start: s.Start}
		switch {
		case t.root.PID > 0 && s.PID == t.root.PID && (t.root.Start == 0 || s.Start == t.root.Start):
		case t.seen[p] > 0:
		case groupOurs && s.PGID == t.root.PID:
		case t.other[p], t.root.Start != 0 && s.Start < t.root.Start:
			other[p] = true
			continue
		case t.runID != "" && procfs.HasEnv(s.PID, envKV):
		default:
			other[p] = true
			continue
		}
		member[s.PID] = p
	}
	// Descendants of members belong to the run too.
	queue := make([]int, 0, len(member))
	for pid := range member {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if c.Dead() || c.PID == t.self {
				continue
			}
			if _, ok := member[c.PID]; ok {
				continue
			}
			p := Process{PID: c.PID, Start: c.Start}
			delete(other, p)
			member[c.PID] = p
			queue = append(queue, c.PID)
		}
	}
	t.other = other
	t.group = groupOurs
	seen := make(map[Process]int, len(member))
	out := make([]Process, 0, len(member))
	for _, p := range member {
		seen[p] = t.seen[p] + 1
		out = append(out, p)
	}
	t.seen = seen
	t.sort(out)
	t.last = out
	return out, nil
}

// sort orders processes leader first, then by pid.
func (t *Tree) sort(ps []Process) {
	slices.SortFunc(ps, func(a, b Process) int {
		switch {
		case a.PID == t.root.PID:
			return -1
		case b.PID == t.root.PID:
			return 1
		}
		return a.PID - b.PID
	})
}

// Stable returns the members alive at the last scan that were seen by at
// least two scans (the leader always): the processes worth recording,
// leaving out the many short-lived commands a script runs. At most 256.
func (t *Tree) Stable() []Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Process
	for _, p := range t.last {
		if p.PID == t.root.PID || t.seen[p] >= 2 {
			out = append(out, p)
		}
		if len(out) == maxRecorded {
			break
		}
	}
	return out
}

// Kill kills every process of the run and waits until none is left alive
// or ctx ends. It first stops them (SIGSTOP, the process group and each
// member), scanning again until a scan finds nothing new, so no process can
// start another one unseen or leave its parent before the kill; then it
// sends SIGKILL and scans until they are gone. It returns how many
// processes it killed. Without /proc it kills the process group only.
func (t *Tree) Kill(ctx context.Context) (int, error) {
	stopped := map[Process]bool{}
	for range 20 {
		ms, err := t.Scan()
		if err != nil {
			// Without /proc the process group is all that is known; it is
			// safe to signal only while the leader is the caller's child.
			n := 0
			if t.ownRoot && syscall.Kill(-t.root.PID, syscall.SIGKILL) == nil {
				n = 1
			}
			if errors.Is(err, procfs.ErrUnsupported) {
				return n, nil
			}
			return n, fmt.Errorf("runner: kill run %s: %w", t.runID, err)
		}
		if t.groupIsOurs() {
			_ = syscall.Kill(-t.root.PID, syscall.SIGSTOP)
		}
		fresh := false
		for _, m := range ms {
			if !stopped[m] {
				stopped[m] = true
				fresh = true
				signalExact(m, syscall.SIGSTOP)
			}
		}
		if !fresh {
			break
		}
	}
	killed := map[Process]bool{}
	wait := 2 * time.Millisecond
	for {
		if t.groupIsOurs() {
			_ = syscall.Kill(-t.root.PID, syscall.SIGKILL)
		}
		for p := range stopped {
			if !killed[p] && signalExact(p, syscall.SIGKILL) {
				killed[p] = true
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return len(killed), fmt.Errorf("runner: kill run %s: processes still alive: %w", t.runID, ctx.Err())
		case <-timer.C:
		}
		if wait < 50*time.Millisecond {
			wait *= 2
		}
		ms, err := t.Scan()
		if err != nil {
			return len(killed), fmt.Errorf("runner: kill run %s: %w", t.runID, err)
		}
		if len(ms) == 0 {
			return len(killed), nil
		}
		for _, m := range ms {
			stopped[m] = true
		}
	}
}

// groupIsOurs reports whether the last scan found the leader's process
// group to be the run's: the leader is the same process, or its pid is not
// in use by another one (a group id is not reused while a member holds it).
func (t *Tree) groupIsOurs() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.group
}

// signalExact signals p only if the process with p's pid is still p. Where
// the runtime holds a pidfd for the process (Linux), the check and the
// signal cannot be fooled by the pid being reused in between.
func signalExact(p Process, sig syscall.Signal) bool {
	proc, err := os.FindProcess(p.PID)
	if err != nil {
		return false
	}
	defer proc.Release()
	if p.Start != 0 {
		if s, err := procfs.Read(p.PID); err != nil || s.Start != p.Start {
			return false
		}
	}
	return proc.Signal(sig) == nil
}

// KillRun kills what is left of a run whose owner is gone: its recorded
// processes (the leader first, as a Tree reports them) that are still the
// same processes, its process group, every process whose environment names
// the run, and their descendants. It returns how many processes it
// signalled.
func KillRun(ctx context.Context, runID string, recorded []Process) (int, error) {
	var root Process
	if len(recorded) > 0 && recorded[0].Start != 0 {
		root = recorded[0]
	}
	return NewTree(runID, root, recorded).Kill(ctx)
}
