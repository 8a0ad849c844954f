package runner

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/internal/procfs"
)

// identify returns the process with pid as it is now.
func identify(t *testing.T, pid int) Process {
	t.Helper()
	s, err := procfs.Read(pid)
	if err != nil || s.Dead() {
		t.Fatalf("process %d: %+v %v", pid, s, err)
	}
	return Process{PID: pid, Start: s.Start}
}

// alive reports whether p is still running (not exited, not reused).
func alive(p Process) bool {
	s, err := procfs.Read(p.PID)
	return err == nil && s.Start == p.Start && !s.Dead()
}

// waitGone waits until none of ps runs; the kernel finishes a killed
// process asynchronously.
func waitGone(t *testing.T, ps ...Process) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range ps {
		for alive(p) {
			if time.Now().After(deadline) {
				t.Fatalf("process %+v survived", p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func readPids(t *testing.T, dir string, names ...string) []int {
	t.Helper()
	var out []int
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

// treeScript starts a plain background child, a setsid grandchild that
// keeps the environment and one that clears it, notes their pids, and
// waits.
func treeScript(dir string) string {
	return `sleep 30 & echo $! > ` + dir + `/plain
setsid sleep 31 & echo $! > ` + dir + `/setsid
setsid env -i "$(command -v sleep)" 32 & echo $! > ` + dir + `/envless
touch ` + dir + `/ready
wait`
}

// TestShellKillReachesTheWholeTree: a timeout, a replace or a shutdown
// (any end of the run's context) kills the command, its group, and the
// grandchildren that left the group with setsid, even one that cleared
// its environment.
func TestShellKillReachesTheWholeTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var (
		mu      sync.Mutex
		reports [][]Process
	)
	req := shellReq(t, &Shell{Command: treeScript(dir)}, &buf{})
	req.Processes = func(ps []Process) {
		mu.Lock()
		reports = append(reports, slices.Clone(ps))
		mu.Unlock()
	}
	done := make(chan Result, 1)
	go func() { done <- (&ShellRunner{TrackInterval: 20 * time.Millisecond}).Run(ctx, req) }()
	waitFor(t, filepath.Join(dir, "ready"))
	var procs []Process
	for _, pid := range readPids(t, dir, "plain", "setsid", "envless") {
		procs = append(procs, identify(t, pid))
	}
	cancel(errors.New("timeout after 1s"))
	res := <-done
	if res.Err == nil || !strings.Contains(res.Err.Error(), "killed: timeout after 1s") || res.ExitCode != -1 {
		t.Fatalf("result %+v", res)
	}
	waitGone(t, procs...)
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 || len(reports[0]) != 1 {
		t.Fatalf("first report %v, want the group leader alone", reports)
	}
}

// TestShellReportsLongLivedProcesses: the processes a run keeps are
// reported for recording, the leader first, the setsid grandchild without
// the run's environment included.
func TestShellReportsLongLivedProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan []Process, 100)
	req := shellReq(t, &Shell{Command: treeScript(dir)}, &buf{})
	req.Processes = func(ps []Process) {
		select {
		case reports <- slices.Clone(ps):
		default:
		}
	}
	done := make(chan Result, 1)
	go func() { done <- (&ShellRunner{TrackInterval: 20 * time.Millisecond}).Run(ctx, req) }()
	defer func() { cancel(); <-done }()
	first := <-reports
	waitFor(t, filepath.Join(dir, "ready"))
	want := map[int]bool{}
	for _, pid := range readPids(t, dir, "plain", "setsid", "envless") {
		want[identify(t, pid).PID] = true
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ps := <-reports:
			if ps[0] != first[0] {
				t.Fatalf("report %v does not start with the leader %v", ps, first[0])
			}
			n := 0
			for _, p := range ps {
				if want[p.PID] {
					n++
				}
			}
			if n == len(want) {
				return
			}
		case <-timeout:
			t.Fatal("the run's processes were not all reported")
		}
	}
}

// TestKillRun: what is left of a run whose agent died is killed from its
// record and its environment; a process whose pid is in the record but
// whose start time is not (a reused pid) and a process of another run are
// left alone.
func TestKillRun(t *testing.T) {
	t.Parallel()
	const runID = "r20260601T090000-killrun"
	// The run: a shell (the group leader) that starts two setsid
	// processes and exits, as if the agent that ran it had died.
	sh := exec.Command("sh", "-c", `setsid sleep 30 >/dev/null & echo $!; setsid env -i "$(command -v sleep)" 31 >/dev/null & echo $!`)
	sh.Env = append(os.Environ(), EnvRunID+"="+runID)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	// The leader may exit at any moment; as a zombie it keeps its stat.
	st, err := procfs.Read(sh.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	leader := Process{PID: st.PID, Start: st.Start}
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := sh.Wait(); err != nil || len(pids) != 2 {
		t.Fatalf("run: %v, pids %v", err, pids)
	}
	withEnv, envless := identify(t, pids[0]), identify(t, pids[1])
	// Unrelated processes: one of another run, one recorded under a wrong
	// start time (its pid reused).
	other := exec.Command("sleep", "33")
	other.Env = append(os.Environ(), EnvRunID+"=another-run")
	reused := exec.Command("sleep", "34")
	for _, c := range []*exec.Cmd{other, reused} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	otherP, reusedP := identify(t, other.Process.Pid), identify(t, reused.Process.Pid)
	record := []Process{leader, envless, {PID: reusedP.PID, Start: reusedP.Start - 1}}

	n, err := KillRun(t.Context(), runID, record)
	if err != nil || n != 2 {
		t.Fatalf("KillRun = %d, %v; want 2 killed", n, err)
	}
	waitGone(t, withEnv, envless)
	if !alive(otherP) || !alive(reusedP) {
		t.Fatal("a process outside the run was killed")
	}
	if n, err := KillRun(t.Context(), runID, record); err != nil || n != 0 {
		t.Fatalf("second KillRun = %d, %v; want nothing left", n, err)
	}
}

func waitFor(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkScan measures one look at every process of the host for a run
// (what a running shell job costs every 500 ms).
func BenchmarkScan(b *testing.B) {
	tree := NewTree("bench-run", Process{}, nil)
	for b.Loop() {
		if _, err := tree.Scan(); err != nil {
			b.Fatal(err)
		}
	}
	all, _ := procfs.All()
	b.ReportMetric(float64(len(all)), "processes")
}
