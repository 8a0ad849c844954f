package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

// TestObserveAllLedgerLinesOfAnotherRuntime: the ledger lines another
// Runtime on the home writes (as `jobs run --here` in another process
// does) reach this Runtime's ObserveAll observers through its watcher,
// each once and in order, beside this Runtime's own lines, told once.
func TestObserveAllLedgerLinesOfAnotherRuntime(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.WatchInterval = 10 * time.Millisecond })
	told := make(chan ledger.Entry, 64)
	b.rt.Ledger().ObserveAll(func(e ledger.Entry) { told <- e })
	b.add(t, JobSpec{ID: "here", Schedule: "@daily"})
	b.add(t, JobSpec{ID: "there", Schedule: "@daily", Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: "true"}}})

	res, err := b.rt.RunNow(t.Context(), "here", RunOptions{})
	if err != nil || res.RunID == "" {
		t.Fatalf("run here: %+v, %v", res, err)
	}
	b.gate.finish(b.started(t), nil)
	b.wait(t, res.RunID)

	other, err := Open(t.Context(), Config{Home: b.home, Now: b.clock.Now, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	res, err = other.RunNow(t.Context(), "there", RunOptions{})
	if err != nil || res.RunID == "" {
		t.Fatalf("run there: %+v, %v", res, err)
	}
	run, err := other.Wait(t.Context(), res.RunID, t0.Add(-48*time.Hour))
	if err != nil || run.State != ledger.StateSucceeded {
		t.Fatalf("run there: %+v, %v", run, err)
	}

	var got []string
	timeout := time.After(10 * time.Second)
	for !slices.Contains(got, run.RunID+"/"+string(ledger.StateSucceeded)) {
		select {
		case e := <-told:
			got = append(got, e.RunID+"/"+string(e.State))
		case <-timeout:
			t.Fatalf("the other Runtime's run was not told: %q", got)
		}
	}
	// What is left to tell is told now: all is in the files.
	if err := b.rt.Ledger().Follow(t.Context()); err != nil {
		t.Fatal(err)
	}
	for len(told) > 0 {
		e := <-told
		got = append(got, e.RunID+"/"+string(e.State))
	}
	es, err := b.rt.Ledger().Entries(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range es {
		want = append(want, e.RunID+"/"+string(e.State))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("told %q, want each line of the ledger once, in order: %q", got, want)
	}
}
