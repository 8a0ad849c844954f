package pgtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// ownerFile, in a cluster's directory, names the test process that
	// owns the cluster: its pid and, where the system tells, its start
	// time (so a reused pid is not taken for the owner).
	ownerFile = "owner"
	// ownerlessAge is how old a directory without a readable owner file
	// must be before it is judged abandoned: its owner writes the file
	// right after creating the directory, so a young one may be in the
	// middle of that.
	ownerlessAge = time.Hour
)

// owner is the test process a cluster belongs to.
type owner struct {
	pid   int
	start string // "" where unknown
}

func writeOwner(dir string) error {
	pid := os.Getpid()
	start, _ := processStart(pid)
	line := fmt.Sprintf("%d %s\n", pid, start)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(line), 0o644); err != nil {
		return fmt.Errorf("pgtest: owner file: %w", err)
	}
	return nil
}

func readOwner(dir string) (owner, bool) {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return owner{}, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || len(f) > 2 {
		return owner{}, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return owner{}, false
	}
	o := owner{pid: pid}
	if len(f) == 2 {
		o.start = f[1]
	}
	return o, true
}

// gone reports whether the owner has ended: no process has its pid, or the
// one that has it started at another time.
func (o owner) gone() bool {
	start, alive := processStart(o.pid)
	return !alive || (o.start != "" && start != "" && start != o.start)
}

// sweep removes the cluster directories under root that their owners
// abandoned, as of now: those whose owner is gone, and those without an
// owner file older than ownerlessAge. A postmaster still running in a
// directory whose owner is gone is stopped first (where the system lets
// it be recognised as that directory's); one running in a directory
// without an owner keeps it. The sweep is best effort: what it cannot
// remove stays for a later one.
func sweep(root string, now time.Time) {
	dirs, _ := filepath.Glob(filepath.Join(root, dirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		o, known := readOwner(dir)
		switch {
		case known && !o.gone():
			continue
		case !known && now.Sub(fi.ModTime()) < ownerlessAge:
			continue
		}
		stop := keepRunning
		if known {
			stop = stopRunning
		}
		removeAbandoned(dir, stop)
	}
}

// runningPostmaster says what the sweep does with a postmaster still
// running in a directory it removes.
type runningPostmaster int

const (
	keepRunning runningPostmaster = iota // leave it, and the directory
	stopRunning                          // stop it, then remove the directory
)

// removeAbandoned removes the cluster directory dir after stopping its
// postmaster, if one still runs and running says so, and removing its
// shared memory segment.
func removeAbandoned(dir string, running runningPostmaster) {
	data := filepath.Join(dir, "data")
	p, err := readPidFile(data)
	if err == nil {
		switch postmasterIn(p.pid, data) {
		case postmasterUnknown:
			return
		case postmasterRunning:
			if running != stopRunning || !stopOrphan(p.pid) {
				return
			}
		}
		if p.shmID >= 0 {
			removeShm(p.shmKey, p.shmID)
		}
	}
	_ = os.RemoveAll(dir)
}

// stopOrphan shuts down a postmaster that is not this process's child:
// SIGQUIT (immediate shutdown, which removes its shared memory), then
// SIGKILL if it is still there after stopTimeout. It reports whether the
// process is gone.
func stopOrphan(pid int) bool {
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGKILL} {
		_ = syscall.Kill(pid, sig)
		for deadline := time.Now().Add(stopTimeout); time.Now().Before(deadline); {
			if _, alive := processStart(pid); !alive {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return false
}

// postmasterState is what the sweep can tell of the process a pid file
// names.
type postmasterState int

const (
	postmasterGone    postmasterState = iota // no such process, or another program's
	postmasterRunning                        // the postmaster of this data directory
	postmasterUnknown                        // a live process the system does not say more of
)

// pidFile is what a postmaster writes in its data directory
// (postmaster.pid): its pid, its shared memory segment, and whether it
// accepts connections.
type pidFile struct {
	pid           int
	shmKey, shmID int // shmID is -1 when the file has none
	ready         bool
}

var errPidFile = errors.New("malformed postmaster.pid")

func readPidFile(data string) (pidFile, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return pidFile{}, err
	}
	lines := strings.Split(string(b), "\n")
	p := pidFile{shmID: -1}
	if p.pid, err = strconv.Atoi(strings.TrimSpace(lines[0])); err != nil || p.pid <= 0 {
		return pidFile{}, errPidFile
	}
	if len(lines) > 6 {
		if f := strings.Fields(lines[6]); len(f) == 2 {
			key, err1 := strconv.Atoi(f[0])
			id, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil {
				p.shmKey, p.shmID = key, id
			}
		}
	}
	p.ready = len(lines) > 7 && strings.TrimSpace(lines[7]) == "ready"
	return p, nil
}
