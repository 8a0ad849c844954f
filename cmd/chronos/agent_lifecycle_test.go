//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// Process tests of a run's life when things fail around it: the agent
// killed mid-run, the home made read-only while a run finishes.

// lifeProc is a process as /proc shows it: its start time tells it from a
// later process given the same pid.
type lifeProc struct {
	name  string
	pid   int
	start string
}

// procStat returns the start time and state of pid ("" when gone).
func procStat(pid int) (start, state string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		return "", ""
	}
	return f[19], f[0]
}

// alive reports whether p still runs: same pid and start time, not a
// zombie.
func (p lifeProc) alive() bool {
	start, state := procStat(p.pid)
	return start == p.start && state != "Z" && state != "X"
}

// readProc identifies the process whose pid the job wrote to file.
func readProc(t *testing.T, name, file string) lifeProc {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	start, state := procStat(pid)
	if start == "" || state == "Z" {
		t.Fatalf("%s (pid %d) is not running", name, pid)
	}
	return lifeProc{name: name, pid: pid, start: start}
}

// poll calls cond every 10 ms until it is true or d passes.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFile waits until the job creates path.
func waitFile(t *testing.T, path string, d time.Duration) {
	t.Helper()
	poll(t, d, path+" to appear", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// ledgerLines returns every ledger line of home (nil while unreadable).
func ledgerLines(t *testing.T, home string) []ledger.Entry {
	t.Helper()
	lg, err := ledger.Open(filepath.Join(home, "runs"))
	if err != nil {
		return nil
	}
	es, err := lg.Entries(context.Background(), ledger.Filter{})
	if err != nil {
		return nil
	}
	return es
}

func linesIn(es []ledger.Entry, s ledger.State) []ledger.Entry {
	var out []ledger.Entry
	for _, e := range es {
		if e.State == s {
			out = append(out, e)
		}
	}
	return out
}

// storedJob reads the job as jobs.json holds it.
func storedJob(t *testing.T, home, id string) job.Job {
	t.Helper()
	st, err := store.Open(home, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	j, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func addJob(t *testing.T, args ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), append([]string{"jobs", "add"}, args...), &out, &errOut); code != 0 {
		t.Fatalf("jobs add: exit %d: %s", code, errOut.String())
	}
}

// TestAgentKilledMidRunIsSettledAtStart: a shell job forks a setsid
// grandchild (and one that also clears its environment) and waits; the
// agent is killed with SIGKILL mid-run. The restarted agent records the run
// interrupted within a second, no process of the run survives it, and
// under on_interrupt retry the slot runs again at once.
func TestAgentKilledMidRunIsSettledAtStart(t *testing.T) {
	t.Setenv(envAgentConfig, "")
	bin := buildChronos(t)
	for _, policy := range []string{"retry", "record"} {
		t.Run(policy, func(t *testing.T) {
			dir := t.TempDir()
			home, marks := filepath.Join(dir, "home"), filepath.Join(dir, "marks")
			if err := os.Mkdir(marks, 0o700); err != nil {
				t.Fatal(err)
			}
			script := fmt.Sprintf(`echo "$CHRONOS_ATTEMPT" >> %[1]s/attempts
if [ "$CHRONOS_ATTEMPT" = 1 ]; then
  setsid sleep 300 >/dev/null 2>&1 & echo $! > %[1]s/setsid
  setsid env -i "$(command -v sleep)" 301 >/dev/null 2>&1 & echo $! > %[1]s/envless
  sleep 302 & echo $! > %[1]s/child
  echo $$ > %[1]s/shell
  touch %[1]s/started
  wait
fi`, marks)
			addJob(t, "--home", home, "--id", "tree", "--schedule", "in 1s", "--on-interrupt", policy, "--", script)
			env := []string{envAgentConfig + "="}
			first := startProc(t, bin, env, nil, "agent", "serve", "--home", home, "--listen", "127.0.0.1:0")
			waitFile(t, filepath.Join(marks, "started"), 20*time.Second)
			var procs []lifeProc
			for _, n := range []string{"shell", "child", "setsid", "envless"} {
				procs = append(procs, readProc(t, n, filepath.Join(marks, n)))
			}
			t.Cleanup(func() {
				for _, p := range procs {
					if p.alive() {
						_ = syscall.Kill(p.pid, syscall.SIGKILL)
					}
				}
			})
			// The agent follows the run's processes and records them: the
			// grandchild that left the group and cleared its environment is
			// known only from this record.
			envless := procs[3]
			poll(t, 10*time.Second, "the run's processes recorded in jobs.json", func() bool {
				j := storedJob(t, home, "tree")
				return len(j.Claims) == 1 && containsPID(j.Claims[0], envless.pid)
			})

			if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = first.wait(t, 10*time.Second)
			// Only the direct child gets the kernel's death signal; the
			// rest live on.
			for _, p := range procs[1:] {
				if !p.alive() {
					t.Fatalf("%s died with the agent; the test would prove nothing", p.name)
				}
			}

			restart := time.Now()
			startProc(t, bin, env, nil, "agent", "serve", "--home", home, "--listen", "127.0.0.1:0")
			var interrupted ledger.Entry
			poll(t, 10*time.Second, "the run recorded interrupted", func() bool {
				is := linesIn(ledgerLines(t, home), ledger.StateInterrupted)
				if len(is) > 0 {
					interrupted = is[0]
				}
				return len(is) > 0
			})
			took := interrupted.Time.Sub(restart)
			if took > time.Second {
				t.Errorf("interrupted %s after the restart, want within a second", took)
			}
			t.Logf("recorded interrupted %s after the restart", took.Round(time.Millisecond))
			if !strings.Contains(interrupted.Reason, "is gone") {
				t.Errorf("interrupted because %q, want the owner gone", interrupted.Reason)
			}
			// What was left of the run was killed before the line was
			// written.
			for _, p := range procs {
				if p.alive() {
					t.Errorf("%s (pid %d) of the interrupted run survived", p.name, p.pid)
				}
			}

			lg, err := ledger.Open(filepath.Join(home, "runs"))
			if err != nil {
				t.Fatal(err)
			}
			switch policy {
			case "retry":
				var r ledger.Run
				poll(t, 10*time.Second, "the retry to succeed", func() bool {
					runs, err := lg.Runs(t.Context(), ledger.Filter{JobID: "tree"})
					if err != nil || len(runs) != 1 {
						return false
					}
					r = runs[0]
					return r.State == ledger.StateSucceeded
				})
				want := []ledger.State{"claimed", "running", "interrupted", "claimed", "running", "succeeded"}
				if !slices.Equal(r.States, want) || r.Token != 2 || r.Attempt != 2 {
					t.Fatalf("run %+v, want %v with token 2", r, want)
				}
				claims := linesIn(ledgerLines(t, home), ledger.StateClaimed)
				if retried := claims[len(claims)-1]; retried.Time.Sub(interrupted.Time) > time.Second {
					t.Errorf("retried %s after the interruption, want at once", retried.Time.Sub(interrupted.Time))
				}
				if b, _ := os.ReadFile(filepath.Join(marks, "attempts")); string(b) != "1\n2\n" {
					t.Fatalf("attempts %q, want 1 and 2", b)
				}
			case "record":
				runs, err := lg.Runs(t.Context(), ledger.Filter{JobID: "tree"})
				if err != nil || len(runs) != 1 || runs[0].State != ledger.StateInterrupted {
					t.Fatalf("runs %+v %v, want the one run interrupted", runs, err)
				}
				if j := storedJob(t, home, "tree"); len(j.Claims) != 0 || len(j.Pending) != 0 {
					t.Fatalf("claims %+v pending %+v, want none under record", j.Claims, j.Pending)
				}
				if b, _ := os.ReadFile(filepath.Join(marks, "attempts")); string(b) != "1\n" {
					t.Fatalf("attempts %q, want one", b)
				}
			}
		})
	}
}

func containsPID(c job.Claim, pid int) bool {
	for _, p := range c.Procs {
		if p.PID == pid {
			return true
		}
	}
	return false
}

// readOnly makes dir unwritable until the returned restore is called (also
// at cleanup). As root, whom permissions do not stop, dir is covered by a
// read-only bind mount of itself: files already open stay writable, every
// new write fails with EROFS. Otherwise the directories lose their write
// bits and the ledger's files too.
func readOnly(t *testing.T, dir string) func() {
	t.Helper()
	var restore func() error
	if os.Geteuid() == 0 {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount %s: %v (root without CAP_SYS_ADMIN cannot make a directory read-only)", dir, err)
		}
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			_ = syscall.Unmount(dir, 0)
			t.Fatalf("remount %s read-only: %v", dir, err)
		}
		restore = func() error { return syscall.Unmount(dir, 0) }
	} else {
		var changed []string
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			mode := os.FileMode(0o400)
			if d.IsDir() {
				mode = 0o500
			}
			changed = append(changed, path)
			return os.Chmod(path, mode)
		})
		if err != nil {
			t.Fatal(err)
		}
		restore = func() error {
			var errs []error
			for _, p := range changed {
				mode := os.FileMode(0o600)
				if fi, err := os.Stat(p); err == nil && fi.IsDir() {
					mode = 0o700
				}
				errs = append(errs, os.Chmod(p, mode))
			}
			return errors.Join(errs...)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "probe"), nil, 0o600); err == nil {
		_ = os.Remove(filepath.Join(dir, "probe"))
		_ = restore()
		t.Fatalf("%s is still writable", dir)
	}
	done := false
	undo := func() {
		if !done {
			done = true
			if err := restore(); err != nil {
				t.Errorf("making %s writable again: %v", dir, err)
			}
		}
	}
	t.Cleanup(undo)
	return undo
}

// readyz returns the agent's readiness status and body.
func readyz(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAgentHoldsACompletionWhileTheHomeIsReadOnly: the home becomes
// read-only while a run (under on_interrupt retry) is going; the run ends;
// /readyz and agent status say the store is not writable meanwhile; once
// the home is writable again the result is stored: exactly one succeeded
// line, no interrupted line, no second run.
func TestAgentHoldsACompletionWhileTheHomeIsReadOnly(t *testing.T) {
	t.Setenv(envAgentConfig, "")
	bin := buildChronos(t)
	dir := t.TempDir()
	home, marks := filepath.Join(dir, "home"), filepath.Join(dir, "marks")
	if err := os.Mkdir(marks, 0o700); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`echo "$CHRONOS_ATTEMPT" >> %[1]s/attempts; touch %[1]s/started
while [ ! -e %[1]s/go ]; do sleep 0.05; done`, marks)
	addJob(t, "--home", home, "--id", "ro", "--schedule", "in 1s", "--on-interrupt", "retry", "--retry-backoff", "100ms", "--", script)
	addr := freeAddr(t)
	url := "http://" + addr
	startProc(t, bin, []string{envAgentConfig + "="}, nil, "agent", "serve", "--home", home, "--listen", addr)
	waitHTTP(t, url+"/readyz", 20*time.Second)
	waitFile(t, filepath.Join(marks, "started"), 20*time.Second)

	restore := readOnly(t, home)
	var body string
	poll(t, 10*time.Second, "/readyz to report the store", func() bool {
		var code int
		code, body = readyz(t, url)
		return code == http.StatusServiceUnavailable && strings.Contains(body, `"store":"not writable`)
	})
	var status, stderr bytes.Buffer
	if code := run(t.Context(), []string{"agent", "status", "--home", home, "--json"}, &status, &stderr); code != 0 {
		t.Fatalf("agent status on a read-only home: exit %d: %s", code, stderr.String())
	}
	var st struct {
		StoreWritable bool   `json:"store_writable"`
		StoreError    string `json:"store_error"`
	}
	if err := json.Unmarshal(status.Bytes(), &st); err != nil || st.StoreWritable || !strings.Contains(st.StoreError, "read-only") && !strings.Contains(st.StoreError, "permission denied") {
		t.Fatalf("status %s: %+v %v", status.String(), st, err)
	}

	// The run ends while nothing can be written: its result is held.
	writeFile(t, filepath.Join(marks, "go"), "")
	poll(t, 10*time.Second, "/readyz to report the held result", func() bool {
		_, body = readyz(t, url)
		return strings.Contains(body, "not stored yet")
	})

	restore()
	poll(t, 20*time.Second, "the run to be stored succeeded", func() bool {
		return len(linesIn(ledgerLines(t, home), ledger.StateSucceeded)) > 0
	})
	es := ledgerLines(t, home)
	if n, m := len(linesIn(es, ledger.StateSucceeded)), len(linesIn(es, ledger.StateInterrupted)); n != 1 || m != 0 {
		t.Fatalf("%d succeeded and %d interrupted lines, want 1 and 0: %+v", n, m, es)
	}
	j := storedJob(t, home, "ro")
	if len(j.Claims) != 0 || len(j.Pending) != 0 || j.LastStatus != "succeeded" {
		t.Fatalf("job claims %+v pending %+v status %q: the slot is still owed", j.Claims, j.Pending, j.LastStatus)
	}
	if b, _ := os.ReadFile(filepath.Join(marks, "attempts")); string(b) != "1\n" {
		t.Fatalf("attempts %q: the command ran more than once", b)
	}
	poll(t, 10*time.Second, "/readyz to be ready again", func() bool {
		code, _ := readyz(t, url)
		return code == http.StatusOK
	})
}
