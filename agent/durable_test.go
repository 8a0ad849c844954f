package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

// blocked holds the homes whose jobs.json this process must fail to write.
var blocked sync.Map

// writeFile is the runtimes' writer in tests: the store's own atomic write,
// except for a blocked home, where it fails as a full disk would.
func writeFile(path string, data []byte, perm fs.FileMode) error {
	if _, ok := blocked.Load(filepath.Dir(path)); ok {
		return fmt.Errorf("write %s: %w", path, syscall.ENOSPC)
	}
	return atomicfile.Replace(path, data, perm)
}

// appendFile appends to the store's journal as the store does, except in a
// blocked home, where it fails as a full disk would.
func appendFile(f *os.File, data []byte) error {
	if _, ok := blocked.Load(filepath.Dir(f.Name())); ok {
		return fmt.Errorf("append to %s: %w", f.Name(), syscall.ENOSPC)
	}
	return store.AppendSync(f, data)
}

// blockStore makes every write of home's jobs.json by this process's
// runtimes fail (another process on the home still writes). It returns the
// undo.
func blockStore(t *testing.T, home string) func() {
	t.Helper()
	blocked.Store(home, struct{}{})
	var once sync.Once
	undo := func() { once.Do(func() { blocked.Delete(home) }) }
	t.Cleanup(undo)
	return undo
}

// blockLedger makes every ledger append (and read) fail: the runs
// directory is moved aside and a file takes its place. It returns the undo.
func blockLedger(t *testing.T, home string) func() {
	t.Helper()
	runs := filepath.Join(home, "runs")
	if err := os.Rename(runs, runs+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	undo := func() {
		once.Do(func() {
			if err := os.Remove(runs); err != nil {
				t.Error(err)
			}
			if err := os.Rename(runs+".aside", runs); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(undo)
	return undo
}

// eventually polls cond (state another goroutine changes without a signal
// to wait on) for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCompletionHeldUntilDurable: a run that ends while jobs.json and the
// ledger cannot be written keeps its result in memory; its claim is not
// taken over, by this process or another agent on the host, even after
// its lease on disk expired; once the home is writable the result is
// stored: one succeeded run, no interruption, no second attempt.
func TestCompletionHeldUntilDurable(t *testing.T) {
	t.Parallel()
	bin := agentProc(t)
	g := newGate()
	home := t.TempDir()
	rt, err := Open(t.Context(), Config{Home: home, LeaseTTL: 300 * time.Millisecond, Retention: -1,
		Runners: map[string]runner.Runner{"gate": g}, WriteFile: writeFile, AppendFile: appendFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if _, _, err := rt.AddJob(t.Context(), JobSpec{ID: "h", Schedule: "@yearly", OnInterrupt: "retry",
		Retry: job.Retry{Backoff: job.Duration(10 * time.Millisecond)}, Payload: payloadKind("gate")}); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Hour)
	res, err := rt.RunNow(t.Context(), "h", RunOptions{})
	if err != nil || res.Status != FireAccepted {
		t.Fatalf("%+v %v", res, err)
	}
	id := <-g.started
	if ok, err := rt.StoreWritable(); !ok {
		t.Fatalf("store not writable before the fault: %v", err)
	}
	undoStore, undoLedger := blockStore(t, home), blockLedger(t, home)
	g.finish(id, nil)
	eventually(t, "completion held", func() bool { return rt.Unsaved() == 1 })
	if ok, err := rt.StoreWritable(); ok || !strings.Contains(err.Error(), "not stored yet") {
		t.Fatalf("StoreWritable = %v, %v; want false: result held", ok, err)
	}
	if rt.InFlight() != 1 {
		t.Fatalf("in flight %d, want the held run", rt.InFlight())
	}

	// The lease on disk runs out: renewals cannot be written.
	j, err := rt.Job(t.Context(), "h")
	if err != nil || len(j.Claims) != 1 {
		t.Fatalf("job %+v %v", j.Claims, err)
	}
	time.Sleep(time.Until(j.Claims[0].LeaseUntil.Add(10 * time.Millisecond)))
	// Another agent process on this host sweeps (it can write: the fault
	// left is this process's): the owner lives, so its claim stays.
	undoLedger()
	if out, err := exec.Command(bin, "catchup", "-home", home).CombinedOutput(); err != nil {
		t.Fatalf("catchup: %v\n%s", err, out)
	}
	// So does this process's own sweep: it changes nothing, so it writes
	// nothing (had it reaped the claim, its write would have failed).
	if err := rt.CatchUp(t.Context()); err != nil {
		t.Fatalf("catch-up: %v", err)
	}
	if j, _ := rt.Job(t.Context(), "h"); len(j.Claims) != 1 || len(j.Pending) != 0 || j.LastStatus != "" {
		t.Fatalf("claim taken while its owner lives: claims %+v pending %+v status %q", j.Claims, j.Pending, j.LastStatus)
	}

	undoStore()
	if err := rt.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, err := rt.Wait(t.Context(), res.RunID, since)
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.State{"claimed", "running", "succeeded"}
	if r.State != ledger.StateSucceeded || r.Discarded || !equalStates(r.States, want) || r.Token != 1 {
		t.Fatalf("run %+v, want %v with token 1", r, want)
	}
	j, _ = rt.Job(t.Context(), "h")
	if len(j.Claims) != 0 || len(j.Pending) != 0 || j.LastStatus != "succeeded" || j.FailureStreak != 0 {
		t.Fatalf("job claims %+v pending %+v status %s", j.Claims, j.Pending, j.LastStatus)
	}
	eventually(t, "store writable again", func() bool { ok, _ := rt.StoreWritable(); return ok && rt.Unsaved() == 0 })
	if runs, _ := rt.Ledger().Runs(t.Context(), ledger.Filter{JobID: "h"}); len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
}

// TestLedgerLinesHeldInOrder: lines that cannot be appended are held and
// written later in their order; the run and its job are not affected.
func TestLedgerLinesHeldInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "l", Schedule: "@yearly"})
	undo := blockLedger(t, b.home)
	res, err := b.rt.RunNow(t.Context(), "l", RunOptions{})
	if err != nil || res.Status != FireAccepted {
		t.Fatalf("%+v %v", res, err)
	}
	b.gate.finish(b.started(t), nil)
	eventually(t, "run stored", func() bool { j := b.job(t, "l"); return j.LastStatus == "succeeded" })
	eventually(t, "three lines held", func() bool { return b.rt.Unsaved() == 3 })
	if ok, err := b.rt.StoreWritable(); ok || !strings.Contains(err.Error(), "3 ledger line(s) not written yet") {
		t.Fatalf("StoreWritable = %v, %v", ok, err)
	}
	undo()
	eventually(t, "lines written", func() bool { return b.rt.Unsaved() == 0 })
	r := b.wait(t, res.RunID)
	if !equalStates(r.States, []ledger.State{"claimed", "running", "succeeded"}) {
		t.Fatalf("run %+v", r)
	}
	if ok, err := b.rt.StoreWritable(); !ok {
		t.Fatalf("StoreWritable after: %v", err)
	}
}

// TestStoreWritableProbes: with nothing held, StoreWritable probes the
// home, so an idle agent notices a home it cannot write.
func TestStoreWritableProbes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if ok, err := b.rt.StoreWritable(); !ok {
		t.Fatalf("fresh home: %v", err)
	}
	undo := blockLedger(t, b.home)
	// The probe of a moment ago is reused for 2 s; a failed write of
	// jobs.json makes the next call probe at once.
	undoStore := blockStore(t, b.home)
	if _, _, err := b.rt.AddJob(t.Context(), JobSpec{ID: "p", Schedule: "@daily", Payload: payloadKind("gate")}); !errors.Is(err, store.ErrUnwritable) {
		t.Fatalf("add: %v", err)
	}
	undoStore()
	if ok, err := b.rt.StoreWritable(); ok || !strings.Contains(err.Error(), "runs is not writable") {
		t.Fatalf("StoreWritable = %v, %v; want the runs directory named", ok, err)
	}
	undo()
	if ok, err := b.rt.StoreWritable(); ok {
		t.Fatalf("the failed probe is kept for 2 s, got writable (%v)", err)
	}
}

// TestFireWhileTheStoreIsNotWritable: a fire whose claim cannot be
// written is answered busy (NAS retries it) and starts nothing; once the
// store is writable the same fire is accepted.
func TestFireWhileTheStoreIsNotWritable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.add(t, JobSpec{ID: "f", Schedule: "every 1h"})
	slot := *j.NextRunAt
	b.clock.Set(slot)
	undo := blockStore(t, b.home)
	res := b.fire(t, "f", slot)
	if res.Status != FireBusy || res.RetryAfter != 5*time.Second || res.Reason != "the store is not writable" {
		t.Fatalf("fire: %+v", res)
	}
	if b.rt.InFlight() != 0 || len(b.runs(t, "f")) != 0 {
		t.Fatalf("a refused fire left a run: in flight %d", b.rt.InFlight())
	}
	undo()
	if res := b.fire(t, "f", slot); res.Status != FireAccepted || res.Skipped {
		t.Fatalf("fire after: %+v", res)
	}
	b.gate.finish(b.started(t), nil)
}
