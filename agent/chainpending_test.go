package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// gateStep starts chain id (lifetime 10m) whose first step, in 3m, runs
// on the gate runner, and gives the step's job the overlap and
// on_interrupt policies given through `jobs edit`.
func (b *bundle) gateStep(t *testing.T, id string, overlap, onInterrupt string) ChainStep {
	t.Helper()
	st, err := b.rt.StartChain(context.Background(), ChainStart{ID: id, Class: "disk", Stage: "action",
		Step: StepSpec{Schedule: "in 3m", Payload: runner.Payload{Kind: "gate"}}, Limits: ChainLimits{Lifetime: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := b.rt.EditJob(context.Background(), st.Job.ID, JobPatch{Overlap: &overlap, OnInterrupt: &onInterrupt})
	if err != nil {
		t.Fatal(err)
	}
	if j.Chain == nil || j.Chain.ChainID != id || string(j.Overlap) != overlap {
		t.Fatalf("edited step %+v", j)
	}
	st.Job = j
	return st
}

// TestEditingAStepKeepsItAStep: `jobs edit` of a step's policies keeps
// its chain metadata, and a recurring schedule for it is refused.
func TestEditingAStepKeepsItAStep(t *testing.T) {
	b := setup(t)
	st := b.gateStep(t, "inc", "queue_one", "retry")
	every := "every 1m"
	if _, _, err := b.rt.EditJob(context.Background(), st.Job.ID, JobPatch{Schedule: &every}); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("a recurring schedule for a step: %v", err)
	}
	if j := b.job(t, st.Job.ID); j.Chain == nil || j.Schedule != "in 3m" || j.OnInterrupt != job.InterruptRetry {
		t.Fatalf("step after the edits %+v", j)
	}
}

// TestQueuedRunOfAStepOfAClosedChainIsSkipped: a step (overlap
// queue_one) runs by hand, its fire is queued behind that run, and the
// chain is closed meanwhile. When the running run ends, the queued one
// does not start: it is recorded skipped "chain closed: <reason>", the
// step keeps the outcome of the run that ran, and nothing is left.
func TestQueuedRunOfAStepOfAClosedChainIsSkipped(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	st := b.gateStep(t, "inc", "queue_one", "record")
	first, err := b.rt.RunNow(ctx, st.Job.ID, RunOptions{})
	if err != nil || first.Skipped {
		t.Fatalf("manual run %+v: %v", first, err)
	}
	if got := b.started(t); got != first.RunID {
		t.Fatalf("started %s, want %s", got, first.RunID)
	}
	b.clock.Set(*st.Job.NextRunAt)
	queued := b.fire(t, st.Job.ID, *st.Job.NextRunAt)
	if !queued.Queued || queued.RunID == "" {
		t.Fatalf("fire while the step runs %+v", queued)
	}
	if _, err := b.rt.CloseChain(ctx, ChainClose{ChainID: "inc", Reason: "fixed by hand"}); err != nil {
		t.Fatal(err)
	}
	b.gate.finish(first.RunID, nil)
	if r := b.wait(t, first.RunID); r.State != ledger.StateSucceeded {
		t.Fatalf("the running run ended %s", r.State)
	}
	if r := b.wait(t, queued.RunID); r.State != ledger.StateSkipped || r.Reason != "chain closed: fixed by hand" {
		t.Fatalf("the queued run %+v", r)
	}
	c := b.chain(t, "inc")
	if c.Steps[0].Status != chain.StepSucceeded || c.Steps[0].RunID != first.RunID || c.ClosedReason != "fixed by hand" || b.hasJob(t, st.Job.ID) {
		t.Fatalf("chain %+v, job left %v", c, b.hasJob(t, st.Job.ID))
	}
	if d, _ := b.rt.Desired(ctx); len(d) != 0 {
		t.Fatalf("still desired at NAS: %+v", d)
	}
}

// TestQueuedRunOfAStepOfAnOpenChainRunsAsTheStep: the queued run of a
// step of an open chain starts when the run before it ends; the step
// stays open in between (the chain does not close under it) and ends
// with the queued run, which closes the chain.
func TestQueuedRunOfAStepOfAnOpenChainRunsAsTheStep(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	st := b.gateStep(t, "inc", "queue_one", "record")
	first, err := b.rt.RunNow(ctx, st.Job.ID, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.started(t)
	b.clock.Set(*st.Job.NextRunAt)
	queued := b.fire(t, st.Job.ID, *st.Job.NextRunAt)
	if !queued.Queued {
		t.Fatalf("fire while the step runs %+v", queued)
	}
	b.gate.finish(first.RunID, nil)
	if got := b.started(t); got != queued.RunID {
		t.Fatalf("started %s, want the queued run %s", got, queued.RunID)
	}
	b.wait(t, first.RunID)
	if c := b.chain(t, "inc"); c.State != chain.StateActive || c.Steps[0].Status != chain.StepRunning || c.Steps[0].RunID != queued.RunID {
		t.Fatalf("chain while the queued run runs %+v", c)
	}
	b.gate.finish(queued.RunID, nil)
	b.wait(t, queued.RunID)
	c := b.chain(t, "inc")
	if c.ClosedReason != chain.ReasonDone || c.Steps[0].Status != chain.StepSucceeded || c.Steps[0].RunID != queued.RunID || b.hasJob(t, st.Job.ID) {
		t.Fatalf("chain %+v, job left %v", c, b.hasJob(t, st.Job.ID))
	}
}

// owedRetry starts chain "inc" with a step (on_interrupt retry) whose run's
// owner died: CatchUp records it interrupted and owes a retry after the
// backoff, which it returns.
func (b *bundle) owedRetry(t *testing.T) (ChainStep, job.Pending) {
	t.Helper()
	ctx := context.Background()
	st := b.gateStep(t, "inc", "skip", "retry")
	slot := *st.Job.NextRunAt
	b.plantClaim(t, st.Job.ID, "elsewhere:1:x", slot.Add(time.Minute))
	if err := b.rt.Store().Update(ctx, func(s *store.State) error {
		s.Chain("inc").StepStarted(st.Job.ID, "planted", slot)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.clock.Set(slot.Add(2 * time.Minute))
	if err := b.rt.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	j := b.job(t, st.Job.ID)
	if len(j.Pending) != 1 || j.Pending[0].Cause != job.PendingRetry {
		t.Fatalf("no retry owed: %+v", j.Pending)
	}
	return st, j.Pending[0]
}

// settledStep checks that step st's owed retry was recorded skipped with
// reason, the step marked skipped as that run, chain "inc" closed with
// closed, and nothing of the step left here or at NAS.
func (b *bundle) settledStep(t *testing.T, st ChainStep, retry job.Pending, reason, closed string) {
	t.Helper()
	r := b.wait(t, retry.RunID)
	if r.State != ledger.StateSkipped || r.Reason != reason || r.Attempt != 2 || !slices.Equal(r.States, []ledger.State{ledger.StateInterrupted, ledger.StateSkipped}) {
		t.Fatalf("the retry %+v", r)
	}
	c := b.chain(t, "inc")
	if c.State != chain.StateClosed || c.ClosedReason != closed || c.Steps[0].Status != chain.StepSkipped ||
		c.Steps[0].RunID != retry.RunID || c.Steps[0].Reason != reason || b.hasJob(t, st.Job.ID) {
		t.Fatalf("chain %+v, job left %v", c, b.hasJob(t, st.Job.ID))
	}
	if d, _ := b.rt.Desired(context.Background()); len(d) != 0 {
		t.Fatalf("still desired at NAS: %+v", d)
	}
}

// TestRetryOfAStepAfterItsChainExpiredIsSkipped: a step (on_interrupt
// retry) whose run's owner died is owed a retry after the backoff; when
// its chain expires before the retry's fire, the fire does not run it: the
// retry is recorded skipped "chain expired", the step is marked skipped,
// the chain is closed expired, and the step's job is removed.
func TestRetryOfAStepAfterItsChainExpiredIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st, retry := b.owedRetry(t)
	b.clock.Set(b.chain(t, "inc").ExpiresAt.Add(time.Second))
	if b.clock.Now().Before(retry.NotBefore) {
		b.clock.Set(retry.NotBefore)
	}
	res := b.fire(t, st.Job.ID, retry.NotBefore)
	if res.Status != FireAccepted || !res.Skipped || res.Queued || res.RunID != retry.RunID || res.Reason != "chain expired" {
		t.Fatalf("the retry's fire %+v", res)
	}
	select {
	case id := <-b.gate.started:
		t.Fatalf("run %s started", id)
	default:
	}
	b.settledStep(t, st, retry, "chain expired", chain.ReasonExpired)
}

// TestClosingAChainSkipsAStepsOwedRetry: closing a chain whose step is
// owed a retry (its run's owner died) settles the step at once, as a
// pending step is: the retry is recorded skipped "chain closed: <reason>",
// the step is marked skipped, and its job is removed (so the reconcile
// cancels it at NAS); a fire for the retry's wake time finds no job.
func TestClosingAChainSkipsAStepsOwedRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st, retry := b.owedRetry(t)
	if _, err := b.rt.CloseChain(context.Background(), ChainClose{ChainID: "inc", Reason: "fixed by hand"}); err != nil {
		t.Fatal(err)
	}
	b.settledStep(t, st, retry, "chain closed: fixed by hand", "fixed by hand")
	b.clock.Set(retry.NotBefore)
	if res := b.fire(t, st.Job.ID, retry.NotBefore); res.Status != FireGone {
		t.Fatalf("the retry's fire after the close %+v", res)
	}
	select {
	case id := <-b.gate.started:
		t.Fatalf("run %s started", id)
	default:
	}
}

// TestRetryDueAtRecoverAfterExpiryIsSkipped: a step's run whose owner
// died is retried at once by Recover; when the chain has expired, the
// retry is recorded skipped "chain expired" instead and the chain closes.
func TestRetryDueAtRecoverAfterExpiryIsSkipped(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	st := b.gateStep(t, "inc", "skip", "retry")
	slot := *st.Job.NextRunAt
	b.plantClaim(t, st.Job.ID, fmt.Sprintf("%s:%d:x", runs.Hostname(), deadPID(t)), slot.Add(time.Hour))
	b.clock.Set(b.chain(t, "inc").ExpiresAt.Add(time.Minute))
	if err := b.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-b.gate.started:
		t.Fatalf("run %s started", id)
	default:
	}
	runs := b.runs(t, st.Job.ID)
	if len(runs) != 1 || runs[0].State != ledger.StateSkipped || runs[0].Reason != "chain expired" || runs[0].Attempt != 2 ||
		!slices.Equal(runs[0].States, []ledger.State{ledger.StateInterrupted, ledger.StateSkipped}) {
		t.Fatalf("runs %+v", runs)
	}
	c := b.chain(t, "inc")
	if c.ClosedReason != chain.ReasonExpired || c.Steps[0].Status != chain.StepSkipped || b.hasJob(t, st.Job.ID) {
		t.Fatalf("chain %+v, job left %v", c, b.hasJob(t, st.Job.ID))
	}
}

// TestBackstopOfAStepAfterExpiryDoesNotRunIt: the backstop (no fire came)
// hands an overdue step to its misfire policy; when its chain expired
// meanwhile, the step is recorded skipped "chain expired" as a fire
// would, not run.
func TestBackstopOfAStepAfterExpiryDoesNotRunIt(t *testing.T) {
	b, s := chainSetup(t)
	st, err := b.rt.StartChain(context.Background(), ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: step("3m"), Limits: ChainLimits{Lifetime: 4 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Set(st.Chain.ExpiresAt.Add(time.Second))
	n, err := b.rt.Backstop(context.Background(), func(Overdue) (string, bool) { return "no fire arrived", true })
	if err != nil || n != 1 {
		t.Fatalf("backstop handled %d: %v", n, err)
	}
	if len(s.reqs) != 0 {
		t.Fatal("the step ran")
	}
	runs := b.runs(t, st.Job.ID)
	if len(runs) != 1 || runs[0].State != ledger.StateSkipped || runs[0].Reason != "no fire arrived; chain expired" {
		t.Fatalf("runs %+v", runs)
	}
	c := b.chain(t, "inc")
	if c.ClosedReason != chain.ReasonExpired || c.Steps[0].Status != chain.StepSkipped || b.hasJob(t, st.Job.ID) {
		t.Fatalf("chain %+v, job left %v", c, b.hasJob(t, st.Job.ID))
	}
}

// TestFanoutStepChildrenCarryTheChain: the children and the reducer of a
// fanout job that is a chain step get the step's chain in their request
// (Chain and the CHRONOS_CHAIN_* variables), as a plain step's run does.
func TestFanoutStepChildrenCarryTheChain(t *testing.T) {
	s := &seen{fail: map[string]bool{}, done: make(chan string, 100)}
	b := setup(t, func(c *Config) { c.Runners[runner.KindShell] = s })
	ctx := context.Background()
	st, err := b.rt.StartChain(ctx, ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: StepSpec{Schedule: "in 3m", Payload: shell("true")}})
	if err != nil {
		t.Fatal(err)
	}
	items := []string{"a", "b"}
	if err := b.rt.Store().Update(ctx, func(state *store.State) error {
		j := state.Job(st.Job.ID)
		j.JobKind = job.JobKindFanout
		j.Fanout = &job.Fanout{InputsFrom: writeItems(t, items), ItemVar: "FANOUT_ITEM", Concurrency: 1,
			Reducer: &job.Reducer{Command: "true", RunOn: job.ReduceOnSuccess}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res := b.runStep(t, s, st.Job)
	if r := b.wait(t, res.RunID); r.State != ledger.StateSucceeded || r.Role != ledger.RoleParent {
		t.Fatalf("parent %+v", r)
	}
	s.mu.Lock()
	reqs := slices.Clone(s.reqs)
	s.mu.Unlock()
	if len(reqs) != len(items)+1 {
		t.Fatalf("%d runs, want %d children and the reducer", len(reqs), len(items))
	}
	for i, req := range reqs {
		if req.Chain == nil || req.Chain.ChainID != "inc" || req.Chain.Stage != "action" || req.Chain.Depth != 1 ||
			!req.Chain.ExpiresAt.Equal(st.Chain.ExpiresAt) {
			t.Fatalf("run %d (%s) chain %+v", i, req.RunID, req.Chain)
		}
		if req.Env[EnvChainID] != "inc" || req.Env[EnvChainStage] != "action" || req.Env[EnvChainStep] != st.Job.ID || req.Env[EnvParentRunID] == "" && i < len(items) {
			t.Fatalf("run %d env %v", i, req.Env)
		}
		if child := i < len(items); child != (req.Fanout != nil) {
			t.Fatalf("run %d fanout item %+v", i, req.Fanout)
		}
	}
	if c := b.chain(t, "inc"); c.ClosedReason != chain.ReasonDone || c.Steps[0].RunID != res.RunID {
		t.Fatalf("chain %+v", c)
	}
}

// TestStepInterruptedInAClosedChainIsNotRetried: a step (on_interrupt
// retry) runs while its chain is closed; when the agent shuts down under
// it, the retry the policy owes is recorded skipped "chain closed:
// <reason>" at once, the step keeps its interrupted run, and its job is
// removed in the same write: nothing is armed at NAS for a retry that
// would only be refused at its wake time.
func TestStepInterruptedInAClosedChainIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	st := b.gateStep(t, "inc", "skip", "retry")
	run, err := b.rt.RunNow(ctx, st.Job.ID, RunOptions{})
	if err != nil || run.Skipped {
		t.Fatalf("manual run %+v: %v", run, err)
	}
	if got := b.started(t); got != run.RunID {
		t.Fatalf("started %s, want %s", got, run.RunID)
	}
	if _, err := b.rt.CloseChain(ctx, ChainClose{ChainID: "inc", Reason: "fixed by hand"}); err != nil {
		t.Fatal(err)
	}
	if !b.hasJob(t, st.Job.ID) {
		t.Fatal("the running step's job was removed by the close")
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := b.rt.Close(short); err == nil {
		t.Fatal("close reported no interruption")
	}
	again, err := Open(ctx, Config{Home: b.home, Now: b.clock.Now, Retention: -1, Runners: map[string]runner.Runner{"gate": b.gate}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	runs, err := again.Ledger().Runs(ctx, ledger.Filter{JobID: st.Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]ledger.Run{}
	for _, r := range runs {
		byID[r.RunID] = r
	}
	if r := byID[run.RunID]; len(runs) != 1 || r.State != ledger.StateSkipped || r.Reason != "chain closed: fixed by hand" || r.Attempt != 2 ||
		!slices.Equal(r.States, []ledger.State{ledger.StateClaimed, ledger.StateRunning, ledger.StateInterrupted, ledger.StateSkipped}) {
		t.Fatalf("runs %+v", runs)
	}
	c, err := again.Chain(ctx, "inc")
	if err != nil {
		t.Fatal(err)
	}
	if c.Steps[0].Status != chain.StepInterrupted || c.Steps[0].RunID != run.RunID {
		t.Fatalf("chain %+v", c)
	}
	if _, err := again.Job(ctx, st.Job.ID); err == nil {
		t.Fatal("the step's job is left")
	}
	if d, _ := again.Desired(ctx); len(d) != 0 {
		t.Fatalf("still desired at NAS: %+v", d)
	}
}
