package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// seen is a runner that records the requests it ran and ends each run at
// once, failing those whose stage is in fail.
type seen struct {
	mu   sync.Mutex
	reqs []runner.Request
	fail map[string]bool
	done chan string
}

func (s *seen) Validate(runner.Payload) error { return nil }

func (s *seen) Run(_ context.Context, req runner.Request) runner.Result {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	fail := req.Chain != nil && s.fail[req.Chain.Stage]
	s.mu.Unlock()
	defer func() { s.done <- req.RunID }()
	if fail {
		return runner.Result{Err: errors.New("exit status 1"), ExitCode: 1}
	}
	return runner.Result{}
}

func chainSetup(t *testing.T, mod ...func(*Config)) (*bundle, *seen) {
	t.Helper()
	s := &seen{fail: map[string]bool{}, done: make(chan string, 100)}
	b := setup(t, append([]func(*Config){func(c *Config) { c.Runners["seen"] = s }}, mod...)...)
	return b, s
}

func step(in string) StepSpec {
	return StepSpec{Schedule: "in " + in, Payload: runner.Payload{Kind: "seen"}}
}

func (b *bundle) start(t *testing.T, id, class string) ChainStep {
	t.Helper()
	s, err := b.rt.StartChain(context.Background(), ChainStart{ID: id, Class: class, Stage: "action", Step: step("3m")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runStep fires step job id at its slot and waits for its run to be stored.
func (b *bundle) runStep(t *testing.T, s *seen, job job.Job) FireResult {
	t.Helper()
	b.clock.Set(*job.NextRunAt)
	res := b.fire(t, job.ID, *job.NextRunAt)
	if res.Status != FireAccepted || res.Skipped {
		t.Fatalf("fire %s: %+v", job.ID, res)
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the step did not run")
	}
	b.wait(t, res.RunID)
	return res
}

func (b *bundle) chain(t *testing.T, id string) chain.Chain {
	t.Helper()
	c, err := b.rt.Chain(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *bundle) hasJob(t *testing.T, id string) bool {
	t.Helper()
	_, err := b.rt.Job(context.Background(), id)
	return err == nil
}

func TestChainStartStoresTheChainAndItsStepInOneWrite(t *testing.T) {
	b, _ := chainSetup(t)
	undo := blockStore(t, b.home)
	if _, err := b.rt.StartChain(context.Background(), ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: step("3m")}); err == nil {
		t.Fatal("started on a home that cannot be written")
	}
	undo()
	if cs, _ := b.rt.Chains(context.Background(), ChainFilter{}); len(cs) != 0 || b.hasJob(t, "inc.action.1.1") {
		t.Fatalf("a failed write left %d chains", len(cs))
	}
	s := b.start(t, "inc", "disk")
	j := b.job(t, "inc.action.1.1")
	if j.Chain == nil || j.Chain.ChainID != "inc" || j.Chain.Stage != "action" || j.Chain.Depth != 1 || j.Kind != "once" || j.Name != "chain inc: action (depth 1, attempt 1)" {
		t.Fatalf("step job %+v", j)
	}
	raw, err := os.ReadFile(filepath.Join(b.home, store.JobsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"chains":[{"id":"inc"`) || s.Chain.State != chain.StateArmed {
		t.Fatalf("jobs.json %s", raw)
	}
	if _, err := b.rt.StartChain(context.Background(), ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: step("3m")}); !errors.Is(err, chain.ErrDuplicate) {
		t.Fatalf("second start: %v", err)
	}
	if _, err := b.rt.StartChain(context.Background(), ChainStart{ID: "x", Class: "disk", Stage: "action", Step: StepSpec{Schedule: "every 1m", Payload: runner.Payload{Kind: "seen"}}}); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("recurring step: %v", err)
	}
}

func TestStepRunsWithItsChainAndCompletionClosesIt(t *testing.T) {
	b, s := chainSetup(t)
	st := b.start(t, "inc", "disk")
	res := b.runStep(t, s, st.Job)
	req := s.reqs[0]
	if req.Chain == nil || req.Chain.ChainID != "inc" || req.Env[EnvChainID] != "inc" || req.Env[EnvChainStep] != "inc.action.1.1" ||
		req.Env[EnvChainAttempt] != "1" || req.Env[EnvRunHome] != b.home || req.Env[EnvChainExpiresAt] != st.Chain.ExpiresAt.Format(time.RFC3339) {
		t.Fatalf("request chain %+v env %v", req.Chain, req.Env)
	}
	c := b.chain(t, "inc")
	if c.State != chain.StateClosed || c.ClosedReason != chain.ReasonDone || c.Steps[0].Status != chain.StepSucceeded || c.Steps[0].RunID != res.RunID {
		t.Fatalf("chain %+v", c)
	}
	if b.hasJob(t, "inc.action.1.1") {
		t.Fatal("the step's job is left in jobs.json")
	}
	runs := b.runs(t, "inc.action.1.1")
	if len(runs) != 1 || runs[0].State != ledger.StateSucceeded {
		t.Fatalf("runs %+v", runs)
	}
	es, _ := b.rt.Ledger().Entries(context.Background(), ledger.Filter{JobID: "inc.action.1.1"})
	for _, e := range es {
		if e.Chain == nil || e.Chain.ID != "inc" || e.Chain.Stage != "action" {
			t.Fatalf("line without its chain: %+v", e)
		}
	}
	events := chainEvents(t, b, "inc")
	if !slices.Equal(events, []ledger.State{ledger.ChainStarted, ledger.ChainClosed}) {
		t.Fatalf("chain lines %v", events)
	}
}

func chainEvents(t *testing.T, b *bundle, id string) []ledger.State {
	t.Helper()
	es, err := b.rt.Ledger().Entries(context.Background(), ledger.Filter{JobID: id})
	if err != nil {
		t.Fatal(err)
	}
	var out []ledger.State
	for _, e := range es {
		if e.Kind == ledger.KindChain {
			out = append(out, e.State)
		}
	}
	return out
}

func TestRetryThenSuccessKeepsTheChainOpenUntilTheLastStep(t *testing.T) {
	b, s := chainSetup(t)
	st := b.start(t, "inc", "disk")
	b.runStep(t, s, st.Job)
	// The action spawned nothing: the chain is done. Start another whose
	// verify fails and retries.
	st = b.start(t, "inc2", "disk")
	v, err := b.rt.SpawnStep(context.Background(), ChainSpawn{ChainID: "inc2", SpawnedBy: st.Job.ID, Stage: "verify", Step: step("2m")})
	if err != nil {
		t.Fatal(err)
	}
	b.runStep(t, s, st.Job)
	s.fail["verify"] = true
	r, err := b.rt.SpawnStep(context.Background(), ChainSpawn{ChainID: "inc2", SpawnedBy: v.Job.ID, Retry: true, Step: step("1m")})
	if err != nil || r.Job.ID != "inc2.verify.2.2" {
		t.Fatalf("retry %+v: %v", r.Job.ID, err)
	}
	b.runStep(t, s, v.Job)
	if c := b.chain(t, "inc2"); c.State != chain.StateActive {
		t.Fatalf("closed with a retry pending: %+v", c)
	}
	s.fail["verify"] = false
	b.runStep(t, s, r.Job)
	c := b.chain(t, "inc2")
	if c.State != chain.StateClosed || c.Outcome != chain.OutcomeSuccess || c.Attempts["verify"] != 2 {
		t.Fatalf("chain %+v", c)
	}
}

func TestExpirySweepCancelsPendingSteps(t *testing.T) {
	b, _ := chainSetup(t)
	st, err := b.rt.StartChain(context.Background(), ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: step("3m"), Limits: ChainLimits{Lifetime: 2 * time.Minute}})
	if err == nil {
		t.Fatalf("a first step after the expiry was accepted: %+v", st)
	}
	st, err = b.rt.StartChain(context.Background(), ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: step("3m"), Limits: ChainLimits{Lifetime: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if next, ok, _ := b.rt.NextChainDeadline(context.Background()); !ok || !next.Equal(st.Chain.ExpiresAt) {
		t.Fatalf("deadline %s %v", next, ok)
	}
	if n, _ := b.rt.SweepChains(context.Background()); n != 0 {
		t.Fatal("swept before the expiry")
	}
	b.clock.Set(st.Chain.ExpiresAt)
	if n, err := b.rt.SweepChains(context.Background()); n != 1 || err != nil {
		t.Fatalf("sweep closed %d: %v", n, err)
	}
	c := b.chain(t, "inc")
	if c.State != chain.StateClosed || c.ClosedReason != chain.ReasonExpired || c.Steps[0].Status != chain.StepCancelled || b.hasJob(t, st.Job.ID) {
		t.Fatalf("after the sweep %+v", c)
	}
	if d, _ := b.rt.Desired(context.Background()); len(d) != 0 {
		t.Fatalf("still desired at NAS: %+v", d)
	}
}

func TestStepFiredAfterExpiryIsSkipped(t *testing.T) {
	b, s := chainSetup(t)
	st, err := b.rt.StartChain(context.Background(), ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: step("3m"), Limits: ChainLimits{Lifetime: 4 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Set(st.Chain.ExpiresAt.Add(time.Second))
	res := b.fire(t, st.Job.ID, *st.Job.NextRunAt)
	if !res.Skipped || res.Reason != "chain expired" {
		t.Fatalf("fire %+v", res)
	}
	if len(s.reqs) != 0 {
		t.Fatal("the step ran")
	}
	c := b.chain(t, "inc")
	if c.ClosedReason != chain.ReasonExpired || c.Steps[0].Status != chain.StepSkipped || c.Steps[0].Reason != "chain expired" || b.hasJob(t, st.Job.ID) {
		t.Fatalf("chain %+v", c)
	}
	if runs := b.runs(t, st.Job.ID); len(runs) != 1 || runs[0].State != ledger.StateSkipped || runs[0].Reason != "chain expired" {
		t.Fatalf("runs %+v", runs)
	}
}

func TestSpawnPastALimitClosesTheChainAndOpensTheBreaker(t *testing.T) {
	b, _ := chainSetup(t)
	st, err := b.rt.StartChain(context.Background(), ChainStart{ID: "loop", Class: "web", Stage: "action", Step: step("3m"), Limits: ChainLimits{MaxChildren: 3}})
	if err != nil {
		t.Fatal(err)
	}
	other := b.start(t, "other", "web")
	from := st.Job.ID
	for i := 0; i < 2; i++ {
		s, err := b.rt.SpawnStep(context.Background(), ChainSpawn{ChainID: "loop", SpawnedBy: from, Stage: "again" + string(rune('a'+i)), Step: step("1m")})
		if err != nil {
			t.Fatal(err)
		}
		from = s.Job.ID
	}
	_, err = b.rt.SpawnStep(context.Background(), ChainSpawn{ChainID: "loop", SpawnedBy: from, Stage: "more", Step: step("1m")})
	var le *chain.LimitError
	if !errors.As(err, &le) || le.Limit != chain.LimitChildren {
		t.Fatalf("fourth step: %v", err)
	}
	c := b.chain(t, "loop")
	if c.State != chain.StateClosed || c.ClosedReason != "limit: max_children" || len(c.OpenSteps()) != 0 {
		t.Fatalf("chain %+v", c)
	}
	jobs, _ := b.rt.Jobs(context.Background())
	if len(jobs) != 1 || jobs[0].ID != other.Job.ID {
		t.Fatalf("jobs left: %d", len(jobs))
	}
	bs, _ := b.rt.Breakers(context.Background())
	if len(bs) != 1 || bs[0].State != chain.BreakerOpen || bs[0].Refusals[chain.RefusedLimit] != 1 {
		t.Fatalf("breakers %+v", bs)
	}
	if _, err := b.rt.StartChain(context.Background(), ChainStart{ID: "next", Class: "web", Stage: "action", Step: step("3m")}); !errors.Is(err, chain.ErrBreakerOpen) {
		t.Fatalf("start while open: %v", err)
	}
	if _, err := b.rt.SpawnStep(context.Background(), ChainSpawn{ChainID: "loop", Stage: "more", Step: step("1m")}); !errors.Is(err, chain.ErrClosed) {
		t.Fatalf("spawn into the closed chain: %v", err)
	}
	// A running chain of the class spawns nothing while the breaker is open.
	if _, err := b.rt.SpawnStep(context.Background(), ChainSpawn{ChainID: "other", Stage: "verify", Step: step("1m")}); !errors.Is(err, chain.ErrBreakerOpen) {
		t.Fatalf("spawn while the breaker is open: %v", err)
	}
	if c := b.chain(t, "other"); c.ClosedReason != chain.ReasonBreakerOpen || b.hasJob(t, other.Job.ID) {
		t.Fatalf("other chain %+v", c)
	}
}

func TestBreakerAlertIsDurableAndDeliveredOnce(t *testing.T) {
	alerts := filepath.Join(t.TempDir(), "alerts.jsonl")
	b, s := chainSetup(t, func(c *Config) {
		c.Chains = ChainConfig{Notify: []notify.Target{{Kind: notify.KindFile, Path: alerts}}}
	})
	s.fail["action"] = true
	var runIDs []string
	for _, id := range []string{"a", "b", "c"} {
		st := b.start(t, id, "disk")
		runIDs = append(runIDs, b.runStep(t, s, st.Job).RunID)
		b.clock.Add(time.Minute)
	}
	bs, _ := b.rt.Breakers(context.Background())
	if len(bs) != 1 || bs[0].State != chain.BreakerOpen || !slices.Equal(bs[0].LastRunIDs, runIDs) || len(bs[0].Outbound) != 0 {
		t.Fatalf("breaker %+v (run ids %v)", bs, runIDs)
	}
	box, err := b.rt.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := box.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Body.Event != notify.EventChainBreakerOpen || rows[0].Body.Breaker == nil ||
		!slices.Equal(rows[0].Body.Breaker.RunIDs, runIDs) || !rows[0].Body.Breaker.ResumeAt.Equal(*bs[0].ResumeAt) {
		t.Fatalf("outbox rows %+v", rows)
	}
	if _, err := b.rt.StartChain(context.Background(), ChainStart{ID: "d", Class: "disk", Stage: "action", Step: step("3m")}); !errors.Is(err, chain.ErrBreakerOpen) {
		t.Fatalf("fourth start: %v", err)
	}
	b.clock.Set(*bs[0].ResumeAt)
	if _, err := b.rt.SweepChains(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.start(t, "e", "disk")
	if rows, _ := box.List(context.Background()); len(rows) != 1 {
		t.Fatalf("%d alerts after the cooldown", len(rows))
	}
	if _, err := b.rt.ResetBreaker(context.Background(), "disk"); err != nil {
		t.Fatal(err)
	}
	if evs := chainEvents(t, b, "breaker:disk"); !slices.Equal(evs, []ledger.State{ledger.ChainBreakerOpened, ledger.ChainBreakerClosed, ledger.ChainBreakerReset}) {
		t.Fatalf("breaker lines %v", evs)
	}
}

func TestTwoRuntimesRacingSpawnsCreateOneStep(t *testing.T) {
	b, _ := chainSetup(t)
	st := b.start(t, "inc", "disk")
	other, err := Open(context.Background(), Config{Home: b.home, Now: b.clock.Now, Runners: map[string]runner.Runner{"seen": &seen{}}, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		rt := b.rt
		if i%2 == 1 {
			rt = other
		}
		wg.Go(func() {
			_, errs[i] = rt.SpawnStep(context.Background(), ChainSpawn{ChainID: "inc", SpawnedBy: st.Job.ID, Stage: "verify", Step: step("2m")})
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, chain.ErrDuplicate):
			t.Fatalf("spawn: %v", err)
		}
	}
	c := b.chain(t, "inc")
	if ok != 1 || len(c.Steps) != 2 || c.Children != 2 {
		t.Fatalf("%d spawns succeeded; chain has %d steps", ok, len(c.Steps))
	}
}

func TestClosingChainsKeepsTheNewest(t *testing.T) {
	b, _ := chainSetup(t)
	for i := 0; i < store.KeepClosedChains+3; i++ {
		st, err := b.rt.StartChain(context.Background(), ChainStart{ID: fmt.Sprintf("c%03d", i), Class: "bulk", Stage: "a", Step: step("3m")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.rt.CloseChain(context.Background(), ChainClose{ChainID: st.Chain.ID, Reason: "nothing to do"}); err != nil {
			t.Fatal(err)
		}
		b.clock.Add(time.Second)
	}
	cs, _ := b.rt.Chains(context.Background(), ChainFilter{Class: "bulk"})
	if len(cs) != store.KeepClosedChains || cs[0].ID != "c003" {
		t.Fatalf("%d chains kept, oldest %s", len(cs), cs[0].ID)
	}
}

func TestSweepRemovesTheJobOfAStepWhoseRunDied(t *testing.T) {
	b, _ := chainSetup(t)
	st := b.start(t, "inc", "disk")
	// The step's run was claimed and its owner died: the reap dropped the
	// claim, and nothing will complete the run.
	err := b.rt.store.Update(context.Background(), func(s *store.State) error {
		s.Chain("inc").StepStarted(st.Job.ID, "r-dead", t0)
		j := s.Job(st.Job.ID)
		j.NextRunAt, j.FinishedAt = nil, utcPtr(t0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.rt.CloseChain(context.Background(), ChainClose{ChainID: "inc", Reason: "gave up", Failed: true}); err != nil {
		t.Fatal(err)
	}
	if !b.hasJob(t, st.Job.ID) {
		t.Fatal("the close removed a running step's job")
	}
	if _, err := b.rt.SweepChains(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.hasJob(t, st.Job.ID) || b.chain(t, "inc").Steps[0].Status != chain.StepInterrupted {
		t.Fatalf("after the sweep: job left %v, step %+v", b.hasJob(t, st.Job.ID), b.chain(t, "inc").Steps[0])
	}
}

func TestCatchUpAfterExpiryDoesNotRunTheStep(t *testing.T) {
	b, s := chainSetup(t)
	st, err := b.rt.StartChain(context.Background(), ChainStart{ID: "inc", Class: "disk", Stage: "action", Step: step("3m"), Limits: ChainLimits{Lifetime: 4 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Set(st.Chain.ExpiresAt.Add(time.Minute))
	if err := b.rt.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := b.chain(t, "inc")
	if len(s.reqs) != 0 || c.ClosedReason != chain.ReasonExpired || c.Steps[0].Status != chain.StepCancelled || b.hasJob(t, st.Job.ID) {
		t.Fatalf("ran %d, chain %+v", len(s.reqs), c)
	}
	if cs, _ := b.rt.Chains(context.Background(), ChainFilter{State: chain.StateActive}); cs == nil || len(cs) != 0 {
		t.Fatalf("active chains %#v", cs)
	}
}

func TestSweepEndsAnOpenChainWhoseLastStepDied(t *testing.T) {
	b, _ := chainSetup(t)
	st := b.start(t, "inc", "disk")
	err := b.rt.store.Update(context.Background(), func(s *store.State) error {
		s.Chain("inc").StepStarted(st.Job.ID, "r-dead", t0)
		j := s.Job(st.Job.ID)
		j.NextRunAt, j.FinishedAt = nil, utcPtr(t0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.rt.SweepChains(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := b.chain(t, "inc")
	if b.hasJob(t, st.Job.ID) || c.Steps[0].Status != chain.StepInterrupted || c.ClosedReason != "step failed: action" || c.Outcome != chain.OutcomeFailure {
		t.Fatalf("after the sweep: job left %v, chain %+v", b.hasJob(t, st.Job.ID), c)
	}
}
