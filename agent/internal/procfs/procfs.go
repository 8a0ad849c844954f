package procfs

import (
	"errors"
	"syscall"
)

// ErrUnsupported is returned where the host has no /proc.
var ErrUnsupported = errors.New("procfs: not supported on this system")

// Stat is one process as the kernel describes it.
type Stat struct {
	// PID, PPID, PGID and SID: the process, its parent, its process group
	// and its session.
	PID, PPID, PGID, SID int
	// Start is when the process started, in clock ticks since boot: with
	// the pid, it tells this process from a later one given the same pid.
	Start uint64
	// State is the kernel's one-letter state ('R', 'S', 'Z' for a zombie…).
	State byte
}

// Dead reports whether the process has exited (a zombie waiting to be
// reaped has).
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

// Alive reports whether a process with pid exists (a zombie counts as
// existing; a pid of another user counts as alive).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err == nil || errors.Is(err, syscall.EPERM) {
		return true
	}
	// ESRCH: gone. Anything else: be conservative.
	return !errors.Is(err, syscall.ESRCH)
}
