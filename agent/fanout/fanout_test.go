package fanout

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
)

func items(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(rune('a' + i%26))
	}
	return out
}

func TestExecuteBoundsConcurrency(t *testing.T) {
	t.Parallel()
	var cur, peak atomic.Int32
	sum := Execute(t.Context(), Config{Items: items(100), Concurrency: 5, Run: func(ctx context.Context, i, _ int) Outcome {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond) // hold the slot so children overlap
		cur.Add(-1)
		if i%4 == 0 {
			return Failed
		}
		return Succeeded
	}})
	if p := peak.Load(); p > 5 || p < 2 {
		t.Fatalf("peak concurrency %d, want 2..5", p)
	}
	if sum.Total != 100 || sum.Succeeded != 75 || sum.Failed != 25 || sum.NotRun != 0 {
		t.Fatalf("summary %+v", sum)
	}
	// The failed children, by index, ascending whatever order they ended in.
	for k, i := range sum.FailedItems {
		if i != 4*k {
			t.Fatalf("failed items %v, want every fourth index from 0", sum.FailedItems)
		}
	}
	if len(sum.FailedItems) != 25 {
		t.Fatalf("%d failed items, want 25", len(sum.FailedItems))
	}
}

func TestExecuteRetriesAndResumes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[int][]int{}
	sum := Execute(t.Context(), Config{
		Items:       items(5),
		Concurrency: 2,
		MaxAttempts: 3,
		Prior: map[int]Prior{
			0: {Attempts: 1, Final: true, Outcome: Succeeded}, // done before: not run
			1: {Attempts: 3, Outcome: Failed},                 // attempts used: failed, not run
			2: {Attempts: 1, Outcome: Failed},                 // resumes at attempt 2
		},
		Run: func(_ context.Context, i, a int) Outcome {
			mu.Lock()
			calls[i] = append(calls[i], a)
			mu.Unlock()
			if i == 4 && a < 3 {
				return Failed
			}
			return Succeeded
		},
	})
	want := map[int][]int{2: {2}, 3: {1}, 4: {1, 2, 3}}
	if len(calls) != len(want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	for i, w := range want {
		if len(calls[i]) != len(w) || calls[i][0] != w[0] || calls[i][len(w)-1] != w[len(w)-1] {
			t.Fatalf("item %d attempts %v, want %v", i, calls[i], w)
		}
	}
	if sum.Succeeded != 4 || sum.Failed != 1 || !slices.Equal(sum.FailedItems, []int{1}) {
		t.Fatalf("summary %+v", sum)
	}
}

func TestExecuteStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var started atomic.Int32
	sum := Execute(ctx, Config{Items: items(10), Concurrency: 2, Run: func(ctx context.Context, _, _ int) Outcome {
		if started.Add(1) == 2 {
			cancel()
		}
		<-ctx.Done()
		return Stopped
	}})
	if n := started.Load(); n != 2 {
		t.Fatalf("%d children started, want 2", n)
	}
	if sum.NotRun != 10 {
		t.Fatalf("summary %+v", sum)
	}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	cases := []struct {
		sum    Summary
		tol    float64
		on     job.ReducerOn
		state  ledger.State
		reduce bool
	}{
		{Summary{Total: 10, Succeeded: 10}, 0, job.ReduceOnSuccess, ledger.StateSucceeded, true},
		{Summary{Total: 10, Succeeded: 9, Failed: 1}, 0.1, job.ReduceOnSuccess, ledger.StatePartial, true},
		{Summary{Total: 10, Succeeded: 8, Failed: 2}, 0.1, job.ReduceOnSuccess, ledger.StateFailed, false},
		{Summary{Total: 10, Succeeded: 8, Failed: 2}, 0.1, job.ReduceOnAnySuccess, ledger.StateFailed, true},
		{Summary{Total: 10, Failed: 10}, 0.1, job.ReduceOnAnySuccess, ledger.StateFailed, false},
		{Summary{Total: 10, Failed: 10}, 0, job.ReduceAlways, ledger.StateFailed, true},
		{Summary{Total: 10, Succeeded: 9, Failed: 1}, 0, job.ReduceOnSuccess, ledger.StateFailed, false},
		{Summary{}, 0, job.ReduceOnSuccess, ledger.StateSucceeded, false},
		{Summary{}, 0, job.ReduceAlways, ledger.StateSucceeded, true},
	}
	for _, c := range cases {
		v := Judge(c.sum, c.tol, c.on)
		if v.State != c.state || v.Reduce != c.reduce {
			t.Errorf("Judge(%+v, %g, %s) = %s reduce %v, want %s reduce %v", c.sum, c.tol, c.on, v.State, v.Reduce, c.state, c.reduce)
		}
	}
}

func TestPlanRoundTrip(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	p := Plan{RunID: "r1", JobID: "j", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Items: []string{"a", "b"}}
	if err := WritePlan(home, p); err != nil {
		t.Fatal(err)
	}
	got, found, err := ReadPlan(home, "r1")
	if err != nil || !found || got.Version != PlanVersion || len(got.Items) != 2 || !got.CreatedAt.Equal(p.CreatedAt) {
		t.Fatalf("ReadPlan = %+v, %v, %v", got, found, err)
	}
	if err := RemovePlan(home, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := ReadPlan(home, "r1"); found || err != nil {
		t.Fatalf("after remove: found %v, %v", found, err)
	}
	if ChildRunID("r1", 0) != "r1.c00001" || ReducerRunID("r1") != "r1.reduce" {
		t.Fatal("run ids changed: resumed parents would not find their children")
	}
}
