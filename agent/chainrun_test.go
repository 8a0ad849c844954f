package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

// TestRunNowOfAStepAfterItsChainExpiredIsRefused: a manual run of a step
// whose chain has expired (the sweeper has not closed it yet) does not run,
// as a late fire would not: it is recorded skipped "chain expired", the
// chain closes expired, the step's job is removed and the caller gets an
// error wrapping chain.ErrExpired that names the skipped run.
func TestRunNowOfAStepAfterItsChainExpiredIsRefused(t *testing.T) {
	b, s := chainSetup(t)
	st, err := b.rt.StartChain(context.Background(), ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: step("3m"), Limits: ChainLimits{Lifetime: 4 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Set(st.Chain.ExpiresAt.Add(time.Second))
	res, err := b.rt.RunNow(context.Background(), st.Job.ID, RunOptions{})
	if !errors.Is(err, chain.ErrExpired) || !errors.Is(err, chain.ErrClosed) || chain.ExitCode(err) != chain.ExitClosed {
		t.Fatalf("manual run of a step of an expired chain: %+v, %v", res, err)
	}
	if res.Status != FireAccepted || !res.Skipped || res.Reason != "chain expired" || res.RunID == "" || !strings.Contains(err.Error(), res.RunID) {
		t.Fatalf("result %+v, error %q", res, err)
	}
	if len(s.reqs) != 0 {
		t.Fatal("the step ran")
	}
	c := b.chain(t, "inc")
	if c.State != chain.StateClosed || c.ClosedReason != chain.ReasonExpired || c.Steps[0].Status != chain.StepSkipped ||
		c.Steps[0].RunID != res.RunID || c.Steps[0].Reason != "chain expired" || b.hasJob(t, st.Job.ID) {
		t.Fatalf("chain %+v, job left %v", c, b.hasJob(t, st.Job.ID))
	}
	runs := b.runs(t, st.Job.ID)
	if len(runs) != 1 || runs[0].RunID != res.RunID || runs[0].State != ledger.StateSkipped || runs[0].Trigger != string(TriggerManual) || runs[0].Reason != "chain expired" {
		t.Fatalf("runs %+v", runs)
	}
	if d, _ := b.rt.Desired(context.Background()); len(d) != 0 {
		t.Fatalf("still desired at NAS: %+v", d)
	}
	// Once the step's job is gone, another manual run finds no job.
	if _, err := b.rt.RunAndWait(context.Background(), st.Job.ID, RunOptions{}); err == nil || errors.Is(err, chain.ErrClosed) {
		t.Fatalf("second manual run: %v", err)
	}
}

// TestRunNowOfAStepOfAClosedChainIsRefused: a step's manual run starts it
// (the chain is open), the chain is then closed by hand while the step
// runs; a second manual run is refused with chain.ErrClosed and recorded
// skipped "chain closed: <reason>", and leaves the running step and its
// job alone until its run ends.
func TestRunNowOfAStepOfAClosedChainIsRefused(t *testing.T) {
	b, _ := chainSetup(t)
	ctx := context.Background()
	st, err := b.rt.StartChain(ctx, ChainStart{ID: "inc", Class: "disk", Stage: "action",
		Step: StepSpec{Schedule: "in 3m", Payload: runner.Payload{Kind: "gate"}}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := b.rt.RunNow(ctx, st.Job.ID, RunOptions{})
	if err != nil || first.Skipped || first.RunID == "" {
		t.Fatalf("manual run of a step of an open chain: %+v, %v", first, err)
	}
	if got := <-b.gate.started; got != first.RunID {
		t.Fatalf("started %s, want %s", got, first.RunID)
	}
	if c := b.chain(t, "inc"); c.State != chain.StateActive || c.Steps[0].Status != chain.StepRunning || c.Steps[0].RunID != first.RunID || c.Steps[0].StartedAt == nil {
		t.Fatalf("chain while its step runs %+v", c)
	}
	if _, err := b.rt.CloseChain(ctx, ChainClose{ChainID: "inc", Reason: "fixed by hand"}); err != nil {
		t.Fatal(err)
	}
	res, err := b.rt.RunNow(ctx, st.Job.ID, RunOptions{})
	if !errors.Is(err, chain.ErrClosed) || errors.Is(err, chain.ErrExpired) || !strings.Contains(err.Error(), "fixed by hand") {
		t.Fatalf("manual run of a step of a closed chain: %+v, %v", res, err)
	}
	if !res.Skipped || res.Reason != "chain closed: fixed by hand" || res.RunID == first.RunID {
		t.Fatalf("result %+v", res)
	}
	select {
	case id := <-b.gate.started:
		t.Fatalf("run %s started", id)
	default:
	}
	c := b.chain(t, "inc")
	if c.Steps[0].Status != chain.StepRunning || c.Steps[0].RunID != first.RunID || !b.hasJob(t, st.Job.ID) {
		t.Fatalf("the refusal touched the running step: %+v, job kept %v", c.Steps[0], b.hasJob(t, st.Job.ID))
	}
	b.gate.finish(first.RunID, nil)
	if r := b.wait(t, first.RunID); r.State != ledger.StateSucceeded {
		t.Fatalf("the running step ended %s", r.State)
	}
	if c := b.chain(t, "inc"); c.Steps[0].Status != chain.StepSucceeded || c.ClosedReason != "fixed by hand" || b.hasJob(t, st.Job.ID) {
		t.Fatalf("after the step's run %+v, job left %v", c, b.hasJob(t, st.Job.ID))
	}
	var skipped int
	for _, r := range b.runs(t, st.Job.ID) {
		if r.State == ledger.StateSkipped && r.RunID == res.RunID && r.Reason == res.Reason {
			skipped++
		}
	}
	if skipped != 1 {
		t.Fatalf("the refusal is not in the ledger: %+v", b.runs(t, st.Job.ID))
	}
}

// TestRunNowOfAStepOfALiveChainRunsIt: a manual run before the step's
// slot runs it with its chain, marks it running, and its end closes the
// chain and removes the job; the fire at the slot then finds no job.
func TestRunNowOfAStepOfALiveChainRunsIt(t *testing.T) {
	b, s := chainSetup(t)
	st := b.start(t, "inc", "disk")
	res, err := b.rt.RunNow(context.Background(), st.Job.ID, RunOptions{})
	if err != nil || res.Status != FireAccepted || res.Skipped || res.RunID == "" {
		t.Fatalf("manual run %+v, %v", res, err)
	}
	<-s.done
	if r := b.wait(t, res.RunID); r.State != ledger.StateSucceeded || r.Trigger != string(TriggerManual) {
		t.Fatalf("run %+v", r)
	}
	if req := s.reqs[0]; req.Chain == nil || req.Env[EnvChainID] != "inc" || req.Env[EnvChainStep] != st.Job.ID {
		t.Fatalf("request chain %+v env %v", req.Chain, req.Env)
	}
	c := b.chain(t, "inc")
	if c.State != chain.StateClosed || c.ClosedReason != chain.ReasonDone || c.Steps[0].Status != chain.StepSucceeded ||
		c.Steps[0].RunID != res.RunID || c.Steps[0].StartedAt == nil || b.hasJob(t, st.Job.ID) {
		t.Fatalf("chain %+v, job left %v", c, b.hasJob(t, st.Job.ID))
	}
	b.clock.Set(*st.Job.NextRunAt)
	if f := b.fire(t, st.Job.ID, *st.Job.NextRunAt); f.Status != FireGone {
		t.Fatalf("the fire at the slot after the manual run: %+v", f)
	}
	if len(s.reqs) != 1 {
		t.Fatalf("the step ran %d times", len(s.reqs))
	}
}

// TestRunNowOfAStepWhileTheBreakerIsOpenRunsAsAFireDoes: an open breaker
// refuses starts and spawns, not the steps already armed: a manual run of
// a step of an open chain of the class runs, as a fire of another one does.
func TestRunNowOfAStepWhileTheBreakerIsOpenRunsAsAFireDoes(t *testing.T) {
	b, s := chainSetup(t)
	ctx := context.Background()
	manual, fired := b.start(t, "manual", "web"), b.start(t, "fired", "web")
	loop, err := b.rt.StartChain(ctx, ChainStart{ID: "loop", Class: "web", Stage: "action", Step: step("3m"), Limits: ChainLimits{MaxChildren: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.rt.SpawnStep(ctx, ChainSpawn{ChainID: "loop", SpawnedBy: loop.Job.ID, Stage: "more", Step: step("1m")}); !errors.Is(err, chain.ErrLimit) {
		t.Fatalf("spawn past max_children: %v", err)
	}
	if bs, _ := b.rt.Breakers(ctx); len(bs) != 1 || !bs[0].IsOpen(b.clock.Now()) {
		t.Fatalf("breakers %+v", bs)
	}
	res, err := b.rt.RunNow(ctx, manual.Job.ID, RunOptions{})
	if err != nil || res.Skipped || res.RunID == "" {
		t.Fatalf("manual run while the breaker is open: %+v, %v", res, err)
	}
	<-s.done
	b.wait(t, res.RunID)
	b.runStep(t, s, fired.Job)
	for _, id := range []string{"manual", "fired"} {
		if c := b.chain(t, id); c.ClosedReason != chain.ReasonDone || c.Steps[0].Status != chain.StepSucceeded || c.Steps[0].StartedAt == nil {
			t.Fatalf("chain %s %+v", id, c)
		}
	}
}
