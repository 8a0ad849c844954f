//go:build linux

package pgtest

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// goneWithin bounds how long the processes of a killed test binary's
// cluster may take to end.
const goneWithin = 10 * time.Second

// proc is one process, known by its pid and start time.
type proc struct {
	pid   int
	start string
}

func (p proc) alive() bool {
	start, alive := processStart(p.pid)
	return alive && start == p.start
}

// childrenOf returns the live children of process pid.
func childrenOf(t *testing.T, pid int) []proc {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []proc
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // ended meanwhile
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		if start, alive := processStart(child); alive {
			out = append(out, proc{child, start})
		}
	}
	return out
}

// childProcess starts the test binary as a child in the given EnvChild
// mode; it runs until its standard input is closed or it is killed, and
// is killed at the end of the test in any case.
func childProcess(t *testing.T, mode, dir string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvChild+"="+mode)
	cmd.Dir = dir
	if mode == "cluster" {
		cmd.Stderr = os.Stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewReader(stdout)
}

// A test binary killed with SIGKILL runs no cleanup: its cluster's
// postmaster and the postmaster's children end anyway, and the next start
// removes the directory and shared memory they left.
func TestClusterDiesWithKilledTestBinary(t *testing.T) {
	child, out := childProcess(t, "cluster", "")
	line := make(chan string, 1)
	go func() {
		s, _ := out.ReadString('\n')
		line <- s
	}()
	var pid int
	var dir string
	select {
	case s := <-line:
		if _, err := fmt.Sscanf(s, "%d %s", &pid, &dir); err != nil {
			t.Fatalf("child printed %q: %v", s, err)
		}
	case <-time.After(readyTimeout + time.Minute):
		t.Fatal("child did not start its cluster")
	}
	pf, err := readPidFile(filepath.Join(dir, "data"))
	if err != nil || pf.pid != pid || !pf.ready {
		t.Fatalf("postmaster.pid = %+v, %v; want pid %d, ready", pf, err, pid)
	}
	if shmSupported {
		if key, ok := shmKeyOf(pf.shmID); !ok || key != pf.shmKey {
			t.Fatalf("shared memory %d: key %d, %v; want key %d", pf.shmID, key, ok, pf.shmKey)
		}
	}
	pmStart, alive := processStart(pid)
	if !alive {
		t.Fatalf("postmaster %d not running", pid)
	}
	procs := append([]proc{{pid, pmStart}}, childrenOf(t, pid)...)
	if len(procs) < 2 {
		t.Fatalf("postmaster %d has no children; want its background workers", pid)
	}

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	deadline := time.Now().Add(goneWithin)
	for _, p := range procs {
		for p.alive() {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the killed binary's cluster still runs after %s", p.pid, goneWithin)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	c, err := start()
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the killed binary's cluster directory %s is still there after a new start (%v)", dir, err)
	}
	if key, ok := shmKeyOf(pf.shmID); ok && key == pf.shmKey {
		t.Errorf("the killed binary's shared memory %d is still there after a new start", pf.shmID)
	}
}

// A cluster whose owner is gone but whose postmaster still runs (as after
// a killed binary where the parent-death signal does not exist) is stopped
// and removed by the sweep.
func TestSweepStopsAbandonedPostmaster(t *testing.T) {
	c, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	pf, err := readPidFile(c.data())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(fmt.Sprintf("%d 1\n", os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	sweep(os.TempDir(), time.Now())
	select {
	case <-c.done:
	default:
		t.Fatalf("postmaster %d still runs after the sweep", c.pid)
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory %s is still there after the sweep (%v)", c.dir, err)
	}
	if key, ok := shmKeyOf(pf.shmID); ok && key == pf.shmKey {
		t.Errorf("shared memory %d is still there after the sweep", pf.shmID)
	}
}

// The sweep removes exactly the directories whose owners are gone, and
// stops no process that is not their postmaster.
func TestSweepJudgesOwners(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	self := os.Getpid()
	selfStart, _ := processStart(self)

	exited := exec.Command(os.Args[0], "-test.run=^$")
	exited.Env = append(os.Environ(), EnvChild+"=wait")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := exited.Process.Pid

	owner := func(s string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// postmaster writes a pid file naming pid.
	postmaster := func(pid int) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			data := filepath.Join(dir, "data")
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			pf := fmt.Sprintf("%d\n%s\n1700000000\n5432\n%s\n127.0.0.1\n  5432001         1\nready   \n", pid, data, dir)
			if err := os.WriteFile(filepath.Join(data, "postmaster.pid"), []byte(pf), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// waiterIn starts a process working in the directory's data
	// directory, which the sweep takes for its postmaster, into *cmd.
	waiterIn := func(cmd **exec.Cmd) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			data := filepath.Join(dir, "data")
			if err := os.Mkdir(data, 0o700); err != nil {
				t.Fatal(err)
			}
			*cmd, _ = childProcess(t, "wait", data)
			postmaster((*cmd).Process.Pid)(t, dir)
		}
	}
	var ownerless, abandoned *exec.Cmd

	tests := []struct {
		name  string
		dir   string
		setup []func(t *testing.T, dir string)
		old   bool // modified before ownerlessAge
		kept  bool
	}{
		{name: "owner alive", dir: "pgtest-alive", setup: setups(owner(fmt.Sprintf("%d %s\n", self, selfStart))), kept: true},
		{name: "owner alive, start unknown", dir: "pgtest-alive-nostart", setup: setups(owner(fmt.Sprintf("%d\n", self))), old: true, kept: true},
		{name: "owner exited", dir: "pgtest-exited", setup: setups(owner(fmt.Sprintf("%d x\n", deadPid)))},
		{name: "owner's pid reused", dir: "pgtest-reused", setup: setups(owner(fmt.Sprintf("%d 1\n", self)))},
		{name: "no owner, young", dir: "pgtest-young", kept: true},
		{name: "no owner, old", dir: "pgtest-old", old: true},
		{name: "malformed owner, young", dir: "pgtest-bad-young", setup: setups(owner("me\n")), kept: true},
		{name: "malformed owner, old", dir: "pgtest-bad-old", setup: setups(owner("me\n")), old: true},
		{name: "owner gone, pid file names another program", dir: "pgtest-other",
			setup: setups(owner(fmt.Sprintf("%d x\n", deadPid)), postmaster(self))},
		{name: "owner gone, pid file names a dead process", dir: "pgtest-deadpm",
			setup: setups(owner(fmt.Sprintf("%d x\n", deadPid)), postmaster(deadPid))},
		{name: "owner gone, postmaster running", dir: "pgtest-abandoned",
			setup: setups(owner(fmt.Sprintf("%d x\n", deadPid)), waiterIn(&abandoned))},
		{name: "no owner, old, postmaster running", dir: "pgtest-running", setup: setups(waiterIn(&ownerless)), old: true, kept: true},
		{name: "not a cluster directory", dir: "other-gone", setup: setups(owner(fmt.Sprintf("%d x\n", deadPid))), old: true, kept: true},
	}
	for _, tt := range tests {
		dir := filepath.Join(root, tt.dir)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range tt.setup {
			f(t, dir)
		}
		if tt.old {
			then := now.Add(-ownerlessAge - time.Minute)
			if err := os.Chtimes(dir, then, then); err != nil {
				t.Fatal(err)
			}
		}
	}

	sweep(root, now)

	for _, tt := range tests {
		_, err := os.Stat(filepath.Join(root, tt.dir))
		if kept := err == nil; kept != tt.kept {
			t.Errorf("%s: kept = %v, want %v (%v)", tt.name, kept, tt.kept, err)
		}
	}
	if _, alive := processStart(ownerless.Process.Pid); !alive {
		t.Error("the sweep stopped the postmaster of a directory without an owner")
	}
	if _, alive := processStart(abandoned.Process.Pid); alive {
		t.Error("the sweep left the postmaster of a directory whose owner is gone running")
	}
}

func setups(f ...func(t *testing.T, dir string)) []func(t *testing.T, dir string) { return f }
