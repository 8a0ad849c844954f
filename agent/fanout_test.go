package agent

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/fanout"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// writeItems writes items, one per line, with a comment and blank lines
// the file resolver must leave out, and returns its file:// address.
func writeItems(t testing.TB, items []string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "items.txt")
	body := "# targets\n\n" + strings.Join(items, "\n") + "\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return "file://" + p
}

func shell(cmd string) runner.Payload {
	return runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: cmd}}
}

// runNow runs job id now and waits for its parent run.
func (b *bundle) runNow(t testing.TB, id string) ledger.Run {
	t.Helper()
	res, err := b.rt.RunNow(t.Context(), id, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != FireAccepted || res.RunID == "" {
		t.Fatalf("run now: %+v", res)
	}
	return b.wait(t, res.RunID)
}

func (b *bundle) children(t *testing.T, parent string) []ledger.Run {
	t.Helper()
	rs, err := b.rt.RunChildren(t.Context(), parent)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// maxRunning replays a log of "s" (start) and "e" (end) lines.
func maxRunning(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cur, peak := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		switch sc.Text() {
		case "s":
			cur++
			peak = max(peak, cur)
		case "e":
			cur--
		}
	}
	return peak
}

// TestFanoutPartialWithinTolerance: 200 items at concurrency 4, 10% of them
// failing, tolerance 0.1: the parent is partial, the reducer runs (run_on
// any_success), and no more than 4 children ever run at once.
func TestFanoutPartialWithinTolerance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	var items []string
	for i := range 200 {
		if i%10 == 3 {
			items = append(items, fmt.Sprintf("fail-%d", i))
		} else {
			items = append(items, fmt.Sprintf("ok-%d", i))
		}
	}
	log := filepath.Join(dir, "conc")
	cmd := fmt.Sprintf(`echo s >> %[1]s; echo "item=$FANOUT_ITEM parent=$CHRONOS_PARENT_RUN_ID"; sleep 0.02; echo e >> %[1]s; case "$FANOUT_ITEM" in fail-*) exit 3;; esac`, log)
	reduced := filepath.Join(dir, "reduced")
	b.add(t, JobSpec{ID: "scan", Schedule: "@yearly", Payload: shell(cmd), JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: writeItems(t, items), Concurrency: 4, PartialTolerance: 0.1,
			Reducer: &job.Reducer{Command: `echo "$CHRONOS_PARENT_RUN_ID" > ` + reduced, RunOn: job.ReduceOnAnySuccess}}})
	parent := b.runNow(t, "scan")
	if parent.State != ledger.StatePartial || parent.Role != ledger.RoleParent {
		t.Fatalf("parent %s role %q (%s), want partial parent", parent.State, parent.Role, parent.Reason)
	}
	if !strings.Contains(parent.Reason, "200 items, 180 succeeded, 20 failed") {
		t.Fatalf("parent reason %q", parent.Reason)
	}
	if peak := maxRunning(t, log); peak > 4 || peak < 2 {
		t.Fatalf("at most %d children ran at once, want 2..4", peak)
	}
	kids := b.children(t, parent.RunID)
	if len(kids) != 201 {
		t.Fatalf("%d children and reducer, want 201", len(kids))
	}
	failed := 0
	for i, k := range kids[:200] {
		if k.Role != ledger.RoleChild || k.ParentRunID != parent.RunID || k.Item != items[i] {
			t.Fatalf("child %d: role %q parent %q item %q", i, k.Role, k.ParentRunID, k.Item)
		}
		if k.State == ledger.StateFailed {
			failed++
			if k.ExitCode != 3 {
				t.Fatalf("failed child exit code %d", k.ExitCode)
			}
		}
	}
	if failed != 20 {
		t.Fatalf("%d children failed, want 20", failed)
	}
	out, err := os.ReadFile(filepath.Join(b.home, kids[7].Output))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("item=%s parent=%s", items[7], parent.RunID); !strings.Contains(string(out), want) {
		t.Fatalf("child output %q lacks %q", out, want)
	}
	red := kids[200]
	if red.Role != ledger.RoleReducer || red.State != ledger.StateSucceeded {
		t.Fatalf("reducer %+v", red)
	}
	if got, _ := os.ReadFile(reduced); strings.TrimSpace(string(got)) != parent.RunID {
		t.Fatalf("reducer wrote %q", got)
	}
	if j := b.job(t, "scan"); j.LastStatus != string(ledger.StatePartial) || j.FailureStreak != 0 {
		t.Fatalf("job last status %q streak %d", j.LastStatus, j.FailureStreak)
	}
	if _, found, _ := fanout.ReadPlan(b.home, parent.RunID); found {
		t.Fatal("plan left behind after the parent ended")
	}
}

// TestFanoutVerdicts covers the parent's state and the reducer's
// condition.
func TestFanoutVerdicts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		items   []string
		tol     float64
		runOn   job.ReducerOn
		state   ledger.State
		reduced bool
	}{
		{"all succeed", []string{"a", "b"}, 0, job.ReduceOnSuccess, ledger.StateSucceeded, true},
		{"beyond tolerance", []string{"a", "bad", "bad2"}, 0.5, job.ReduceOnSuccess, ledger.StateFailed, false},
		{"beyond tolerance, always", []string{"a", "bad"}, 0, job.ReduceAlways, ledger.StateFailed, true},
		{"all failed, any_success", []string{"bad"}, 0, job.ReduceOnAnySuccess, ledger.StateFailed, false},
		{"zero items", nil, 0, job.ReduceOnSuccess, ledger.StateSucceeded, false},
		{"zero items, always", nil, 0, job.ReduceAlways, ledger.StateSucceeded, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, JobSpec{ID: "f", Schedule: "@yearly", Payload: shell(`case "$X" in bad*) exit 1;; esac`), JobKind: job.JobKindFanout,
				Fanout: &job.Fanout{InputsFrom: writeItems(t, c.items), Concurrency: 2, PartialTolerance: c.tol, ItemVar: "X",
					Reducer: &job.Reducer{Command: "true", RunOn: c.runOn}}})
			p := b.runNow(t, "f")
			if p.State != c.state {
				t.Fatalf("parent %s (%s), want %s", p.State, p.Reason, c.state)
			}
			kids := b.children(t, p.RunID)
			hasReducer := len(kids) > 0 && kids[len(kids)-1].Role == ledger.RoleReducer
			if hasReducer != c.reduced || len(kids) != len(c.items)+map[bool]int{true: 1}[c.reduced] {
				t.Fatalf("reducer ran %v, want %v (%d runs)", hasReducer, c.reduced, len(kids))
			}
		})
	}
}

// TestFanoutChildRetries: a failing child runs again up to the retry
// policy's attempts, each attempt in the ledger under the same run id.
func TestFanoutChildRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mark := filepath.Join(t.TempDir(), "tries")
	// Fails on its first attempt only.
	cmd := fmt.Sprintf(`echo x >> %[1]s.$FANOUT_ITEM; [ "$(wc -l < %[1]s.$FANOUT_ITEM)" -ge 2 ]`, mark)
	b.add(t, JobSpec{ID: "r", Schedule: "@yearly", Payload: shell(cmd), JobKind: job.JobKindFanout,
		Retry:  job.Retry{MaxAttempts: 2, Backoff: job.Duration(time.Millisecond)},
		Fanout: &job.Fanout{InputsFrom: writeItems(t, []string{"a", "b"}), Concurrency: 2}})
	p := b.runNow(t, "r")
	if p.State != ledger.StateSucceeded {
		t.Fatalf("parent %s (%s)", p.State, p.Reason)
	}
	for _, k := range b.children(t, p.RunID) {
		if k.State != ledger.StateSucceeded || k.Attempt != 2 {
			t.Fatalf("child %s: %s attempt %d, want succeeded on attempt 2", k.RunID, k.State, k.Attempt)
		}
	}
}

// TestCancelFanout: cancelling a parent mid-fanout starts no more
// children, stops the running ones with SIGTERM within 3 s, and runs no
// reducer; every one is recorded cancelled.
func TestCancelFanout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	started, termed := filepath.Join(dir, "started"), filepath.Join(dir, "termed")
	cmd := fmt.Sprintf(`echo "$FANOUT_ITEM" >> %s; trap 'echo "$FANOUT_ITEM" >> %s; exit 143' TERM; sleep 30 & wait`, started, termed)
	b.add(t, JobSpec{ID: "c", Schedule: "@yearly", Payload: shell(cmd), JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: writeItems(t, []string{"1", "2", "3", "4", "5", "6"}), Concurrency: 2,
			Reducer: &job.Reducer{Command: "true", RunOn: job.ReduceAlways}}})
	res, err := b.rt.RunNow(t.Context(), "c", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lines := func(p string) int {
		bs, _ := os.ReadFile(p)
		return strings.Count(string(bs), "\n")
	}
	waitFor(t, func() bool { return lines(started) == 2 })
	if err := b.rt.CancelRun(t.Context(), "nope", ""); !errors.Is(err, ErrRunNotRunning) {
		t.Fatalf("cancel of an unknown run: %v", err)
	}
	at := time.Now()
	if err := b.rt.CancelRun(t.Context(), res.RunID, ""); err != nil {
		t.Fatal(err)
	}
	p := b.wait(t, res.RunID)
	if took := time.Since(at); took > 3*time.Second {
		t.Fatalf("cancel took %s", took)
	}
	if p.State != ledger.StateCancelled {
		t.Fatalf("parent %s (%s), want cancelled", p.State, p.Reason)
	}
	if n := lines(started); n != 2 {
		t.Fatalf("%d children started, want 2", n)
	}
	if n := lines(termed); n != 2 {
		t.Fatalf("%d children saw SIGTERM, want 2", n)
	}
	kids := b.children(t, res.RunID)
	if len(kids) != 2 {
		t.Fatalf("%d child or reducer runs, want the 2 started children", len(kids))
	}
	for _, k := range kids {
		if k.State != ledger.StateCancelled || k.Role != ledger.RoleChild {
			t.Fatalf("child %s %s role %s", k.RunID, k.State, k.Role)
		}
		// Nothing of the child is left: no process names it.
		if n, err := runner.KillRun(t.Context(), k.RunID, nil); n != 0 || err != nil {
			t.Fatalf("child %s left %d processes (%v)", k.RunID, n, err)
		}
	}
}

// TestCancelWorkflowRun stops a workflow's inner command.
func TestCancelWorkflowRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "dep", Schedule: "@yearly", Payload: shell("true")})
	b.runNow(t, "dep")
	b.add(t, JobSpec{ID: "w", Schedule: "@yearly", JobKind: job.JobKindWorkflow,
		Workflow: &job.Workflow{DependsOn: []string{"dep"}, Window: job.Duration(time.Hour)}})
	res, err := b.rt.RunNow(t.Context(), "w", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.started(t)
	if err := b.rt.CancelRun(t.Context(), res.RunID, ""); err != nil {
		t.Fatal(err)
	}
	if r := b.wait(t, res.RunID); r.State != ledger.StateCancelled {
		t.Fatalf("workflow run %s (%s), want cancelled", r.State, r.Reason)
	}
	if j := b.job(t, "w"); j.LastStatus != string(ledger.StateCancelled) || j.FailureStreak != 0 {
		t.Fatalf("job status %q streak %d", j.LastStatus, j.FailureStreak)
	}
}

// waitFor polls cond (a file another process writes) until it holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCancelFromAnotherProcess: a cancel written by another Runtime on the
// home (the CLI) reaches the owner through jobs.json.
func TestCancelFromAnotherProcess(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.WatchInterval = 20 * time.Millisecond })
	b.add(t, JobSpec{ID: "p", Schedule: "@yearly"})
	res, err := b.rt.RunNow(t.Context(), "p", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.started(t)
	other, err := Open(t.Context(), Config{Home: b.home, Now: b.clock.Now, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(t.Context())
	if err := other.CancelRun(t.Context(), res.RunID, ""); err != nil {
		t.Fatal(err)
	}
	if r := b.wait(t, res.RunID); r.State != ledger.StateCancelled || r.Reason != "cancelled on request" {
		t.Fatalf("run %s %q, want cancelled", r.State, r.Reason)
	}
	if err := other.CancelRun(t.Context(), res.RunID, ""); !errors.Is(err, ErrRunNotRunning) {
		t.Fatalf("cancel of an ended run: %v", err)
	}
}

// TestFanoutHTTPAndJobInputs: items from an http server the address
// policy allows, and from another job's output (job://).
func TestFanoutHTTPAndJobInputs(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `["h1","h2"]`)
	}))
	t.Cleanup(srv.Close)
	b := setup(t, func(c *Config) { c.NotifyAddresses = notify.AddressPolicy{AllowPrivate: true} })
	b.add(t, JobSpec{ID: "h", Schedule: "@yearly", Payload: shell("true"), JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: srv.URL + "/items", Concurrency: 2}})
	p := b.runNow(t, "h")
	if kids := b.children(t, p.RunID); p.State != ledger.StateSucceeded || len(kids) != 2 || kids[1].Item != "h2" {
		t.Fatalf("http fanout %s (%s), children %+v", p.State, p.Reason, kids)
	}
	b.add(t, JobSpec{ID: "subs", Schedule: "@yearly", Payload: shell("printf 'a.example\\nb.example\\n'")})
	b.add(t, JobSpec{ID: "j", Schedule: "@yearly", Payload: shell("true"), JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: "job://subs?output_as_lines&window=1h", Concurrency: 2}})
	if p := b.runNow(t, "j"); p.State != ledger.StateFailed || !strings.Contains(p.Reason, "no successful run") {
		t.Fatalf("job input before subs ran: %s %q", p.State, p.Reason)
	}
	b.runNow(t, "subs")
	p = b.runNow(t, "j")
	if kids := b.children(t, p.RunID); p.State != ledger.StateSucceeded || len(kids) != 2 || kids[0].Item != "a.example" {
		t.Fatalf("job fanout %s (%s), children %+v", p.State, p.Reason, kids)
	}
}

// TestFanoutPerItemTimeout: a child past per_item_timeout is stopped and
// counts as failed; the others are not affected.
func TestFanoutPerItemTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "t", Schedule: "@yearly", Payload: shell(`[ "$FANOUT_ITEM" = slow ] && exec sleep 30; true`), JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: writeItems(t, []string{"fast", "slow", "fast2"}), Concurrency: 3,
			PerItemTimeout: job.Duration(200 * time.Millisecond), PartialTolerance: 0.5}})
	start := time.Now()
	p := b.runNow(t, "t")
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("fanout took %s", took)
	}
	kids := b.children(t, p.RunID)
	if p.State != ledger.StatePartial || len(kids) != 3 || kids[1].State != ledger.StateFailed || !strings.Contains(kids[1].Reason, "per-item timeout after 200ms") ||
		kids[0].State != ledger.StateSucceeded {
		t.Fatalf("parent %s (%s), children %+v", p.State, p.Reason, kids)
	}
}
