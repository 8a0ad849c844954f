//go:build linux

package pgtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr runs a tool as cred (nil: as this process) in its own process
// group, so a terminal's signals reach only the test binary, and has the
// kernel kill it when the thread that started it ends: a cluster never
// outlives the test binary, whatever way the binary ends.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	// Go sets the parent-death signal after the credentials, which would
	// clear it.
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// processStart returns when the process pid started, in clock ticks since
// boot (field 22 of /proc/PID/stat), and whether it is alive (a zombie is
// not).
func processStart(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(b[i+1:])) // from field 3, the state
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

// postmasterIn tells whether pid is the postmaster running in the data
// directory data: a postmaster works in its data directory.
func postmasterIn(pid int, data string) postmasterState {
	if _, alive := processStart(pid); !alive {
		return postmasterGone
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		if _, alive := processStart(pid); !alive {
			return postmasterGone
		}
		return postmasterUnknown // another user's process
	}
	if cwd == data {
		return postmasterRunning
	}
	if real, err := filepath.EvalSymlinks(data); err == nil && cwd == real {
		return postmasterRunning
	}
	return postmasterGone
}

// childPids returns the pids of the live children of process pid.
func childPids(pid int) ([]int, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // ended meanwhile
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // from field 3, the state; then the parent
		if len(f) < 2 || f[1] != strconv.Itoa(pid) || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if child, err := strconv.Atoi(filepath.Base(filepath.Dir(st))); err == nil {
			out = append(out, child)
		}
	}
	return out, nil
}
