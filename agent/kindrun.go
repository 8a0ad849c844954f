package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/agent/fanout"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// EnvParentRunID is the variable a fanout child and reducer find their
// parent's run id in.
const EnvParentRunID = "CHRONOS_PARENT_RUN_ID"

// StopGrace is how long a stopped fanout child has between SIGTERM and
// SIGKILL.
const StopGrace = 2 * time.Second

// kindResult is how a run ended as its job kind decided: the runner's
// result and, when set, the state and reason that override it.
type kindResult struct {
	res    runner.Result
	state  ledger.State
	reason string
	// fanout counts a fanout parent's children for its notifications.
	fanout *notify.Fanout
}

// runKind runs claimed run s as its job kind says: a plain job's payload;
// a workflow's payload only if its dependencies allow; a fanout's children
// and reducer.
func (rt *Runtime) runKind(ctx context.Context, r *activeRun, s startReq, out io.Writer, log *slog.Logger) kindResult {
	j := s.job
	switch j.JobKind {
	case job.JobKindWorkflow:
		g := rt.workflowGate(ctx, &j, rt.now())
		if !g.run {
			fmt.Fprintln(out, g.reason)
			log.Info("workflow declined", "state", g.state, "reason", g.reason)
			return kindResult{res: runner.Result{Err: errors.New(g.reason)}, state: g.state, reason: g.reason}
		}
		fmt.Fprintf(out, "workflow: %s\n", g.reason)
		return kindResult{res: rt.runPayload(ctx, r, s, out, log)}
	case job.JobKindFanout:
		fctx := ctx
		if j.Timeout > 0 {
			var cancel context.CancelFunc
			fctx, cancel = context.WithTimeoutCause(ctx, j.Timeout.Std(), fmt.Errorf("timeout after %s", j.Timeout.Std()))
			defer cancel()
		}
		return rt.runFanout(fctx, s, &runner.CapWriter{W: out, Limit: rt.cfg.OutputCap}, log)
	}
	return kindResult{res: rt.runPayload(ctx, r, s, out, log)}
}

// kindRole is the ledger role of j's own runs: parent for a fanout.
func kindRole(j *job.Job) string {
	if j.JobKind == job.JobKindFanout {
		return ledger.RoleParent
	}
	return ""
}

// resumable reports whether claim c of j, found interrupted, is a fanout
// parent whose plan is on disk: it is run again, with the same run id, to
// resume its children.
func (rt *Runtime) resumable(j *job.Job, c job.Claim) bool {
	if j.JobKind != job.JobKindFanout {
		return false
	}
	_, found, err := fanout.ReadPlan(rt.cfg.Home, c.RunID)
	return err == nil && found
}

// childAttempts is how many attempts each fanout child of j has: the
// retry policy's max_attempts, else one.
func childAttempts(j *job.Job) int { return max(j.Retry.MaxAttempts, 1) }

// runFanout runs a fanout parent: the plan (resolved and made durable, or
// read back when resuming), its children, its verdict and its reducer.
func (rt *Runtime) runFanout(ctx context.Context, s startReq, out io.Writer, log *slog.Logger) kindResult {
	j, c := s.job, s.claim
	failed := func(err error) kindResult {
		fmt.Fprintln(out, err)
		return kindResult{res: runner.Result{Err: err}}
	}
	plan, prior, err := rt.fanoutPlan(ctx, &j, c, log)
	if err != nil {
		return failed(err)
	}
	fmt.Fprintf(out, "fanout: %d items from %s, concurrency %d\n", len(plan.Items), j.Fanout.InputsFrom, j.Fanout.Concurrency)
	sum := fanout.Execute(ctx, fanout.Config{
		Items: plan.Items, Prior: prior.children, Concurrency: j.Fanout.Concurrency, MaxAttempts: childAttempts(&j),
		Backoff: func(a int) time.Duration { return j.Retry.Delay(a) },
		Run: func(cctx context.Context, i, attempt int) fanout.Outcome {
			return rt.runChild(cctx, &j, c, child{index: i, item: plan.Items[i], attempt: attempt})
		},
	})
	runOn := ReducerOnOf(j.Fanout)
	v := fanout.Judge(sum, j.Fanout.PartialTolerance, runOn)
	counts := fanoutCounts(sum, plan, j.Fanout.PartialTolerance)
	if cause := context.Cause(ctx); cause != nil {
		kr := failed(fmt.Errorf("%s; stopped: %w", v.Reason, cause))
		kr.fanout = counts
		return kr
	}
	fmt.Fprintln(out, v.Reason)
	if j.Fanout.Reducer != nil && v.Reduce {
		step := rt.reducerStep(ctx, &j, c, prior.reducer)
		o := step.outcome
		if step.run {
			o = rt.runChild(ctx, &j, c, child{index: -1, attempt: step.attempt})
		}
		switch {
		case step.interrupted != "":
			v.State, v.Reason = ledger.StateInterrupted, v.Reason+"; "+step.interrupted
			fmt.Fprintln(out, step.interrupted)
		case o == fanout.Succeeded:
		case step.run && ctx.Err() != nil:
			kr := failed(fmt.Errorf("%s; reducer stopped: %w", v.Reason, context.Cause(ctx)))
			kr.fanout = counts
			return kr
		default:
			v.State, v.Reason = ledger.StateFailed, v.Reason+"; reducer failed"
			fmt.Fprintln(out, "reducer failed")
		}
	}
	kr := kindResult{state: v.State, reason: v.Reason, fanout: counts}
	if !v.State.Succeeded() {
		kr.res.Err = errors.New(v.Reason)
	}
	return kr
}

// fanoutCounts is what the notifications of parent plan say of its
// children: sum's counts and the failed items.
func fanoutCounts(sum fanout.Summary, plan fanout.Plan, tolerance float64) *notify.Fanout {
	f := &notify.Fanout{Items: sum.Total, Succeeded: sum.Succeeded, Failed: sum.Failed, NotRun: sum.NotRun,
		PartialTolerance: tolerance}
	for _, i := range sum.FailedItems {
		f.AddFailed(i, plan.Items[i], fanout.ChildRunID(plan.RunID, i))
	}
	return f
}

// ReducerOnOf is f's reducer condition (success without a reducer).
func ReducerOnOf(f *job.Fanout) job.ReducerOn {
	if f == nil || f.Reducer == nil {
		return job.ReduceOnSuccess
	}
	return f.Reducer.RunOn
}

func (rt *Runtime) dropPlan(runID string, log *slog.Logger) {
	if err := fanout.RemovePlan(rt.cfg.Home, runID); err != nil {
		log.Warn("fanout plan not removed", "error", err)
	}
}

// resumed is what an earlier life of a fanout parent left: how far each
// child got, by item index, and its reducer's run when one began.
type resumed struct {
	children map[int]fanout.Prior
	reducer  *ledger.Run
}

// fanoutPlan returns the plan of parent run c: read back with what its
// children and reducer already did when resuming, else resolved from
// inputs_from and made durable before any child starts.
func (rt *Runtime) fanoutPlan(ctx context.Context, j *job.Job, c job.Claim, log *slog.Logger) (fanout.Plan, resumed, error) {
	plan, found, err := fanout.ReadPlan(rt.cfg.Home, c.RunID)
	if err != nil {
		return plan, resumed{}, err
	}
	if found {
		prior, err := rt.fanoutPrior(ctx, j, c, plan)
		log.Info("fanout resumed", "items", len(plan.Items), "finished", len(prior.children), "reducer_began", prior.reducer != nil)
		return plan, prior, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	items, err := rt.inputs.Resolve(rctx, j.Fanout.InputsFrom)
	if err != nil {
		return plan, resumed{}, fmt.Errorf("fanout: inputs: %w", err)
	}
	plan = fanout.Plan{RunID: c.RunID, JobID: j.ID, CreatedAt: rt.now().UTC(), Items: items}
	if err := fanout.WritePlan(rt.cfg.Home, plan); err != nil {
		return plan, resumed{}, err
	}
	return plan, resumed{}, nil
}

// fanoutPrior reads from the ledger what an earlier life of parent c did
// to its children and its reducer. A child left running is killed if
// anything of it is left, recorded interrupted, and run again under
// on_interrupt retry while attempts remain; a failed child with attempts
// left runs again. The reducer is settled only when the parent reaches it
// (see reducerStep).
func (rt *Runtime) fanoutPrior(ctx context.Context, j *job.Job, c job.Claim, plan fanout.Plan) (resumed, error) {
	runs, err := rt.ledger.Runs(ctx, ledger.Filter{ParentRunID: c.RunID, Since: plan.CreatedAt.Add(-time.Minute)})
	if err != nil {
		return resumed{}, fmt.Errorf("fanout: resume: %w", err)
	}
	index := make(map[string]int, len(plan.Items))
	for i := range plan.Items {
		index[fanout.ChildRunID(c.RunID, i)] = i
	}
	maxA := childAttempts(j)
	prior := resumed{children: map[int]fanout.Prior{}}
	for _, r := range runs {
		if r.Role == ledger.RoleReducer && r.RunID == fanout.ReducerRunID(c.RunID) {
			prior.reducer = &r
			continue
		}
		i, ok := index[r.RunID]
		if !ok || r.Role != ledger.RoleChild {
			continue
		}
		p := fanout.Prior{Attempts: r.Attempt}
		switch r.State {
		case ledger.StateSucceeded:
			p.Final, p.Outcome = true, fanout.Succeeded
		case ledger.StateFailed:
			p.Final, p.Outcome = r.Attempt >= maxA, fanout.Failed
		case ledger.StateCancelled:
			p.Final, p.Outcome = true, fanout.Stopped
		default:
			if !r.State.Terminal() {
				rt.interruptChild(ctx, j, c, r)
			}
			p.Outcome = fanout.Failed
			p.Final = j.OnInterrupt != job.InterruptRetry || r.Attempt >= j.Retry.Attempts()
		}
		prior.children[i] = p
	}
	return prior, nil
}

// endSteps settles parent run c of j, recorded interrupted and not
// resumed (no attempt left): its children and reducer left running are
// killed if anything of them is left and recorded interrupted, and its
// plan is removed. Nothing of the parent runs again.
func (rt *Runtime) endSteps(ctx context.Context, j *job.Job, c job.Claim) {
	log := rt.log.With("job_id", j.ID, "run_id", c.RunID)
	plan, found, err := fanout.ReadPlan(rt.cfg.Home, c.RunID)
	if err != nil || !found {
		if err != nil {
			log.Warn("fanout plan of an interrupted parent unreadable", "error", err)
		}
		return
	}
	runs, err := rt.ledger.Runs(ctx, ledger.Filter{ParentRunID: c.RunID, Since: plan.CreatedAt.Add(-time.Minute)})
	if err != nil {
		// The plan stays: the next start tries again.
		log.Error("steps of an interrupted fanout parent not settled", "error", err)
		return
	}
	for _, r := range runs {
		if !r.State.Terminal() && (r.Role == ledger.RoleChild || r.Role == ledger.RoleReducer) {
			rt.interruptChild(ctx, j, c, r)
		}
	}
	rt.dropPlan(c.RunID, log)
}

// reducer is what a fanout parent does about its reducer once its
// children ended.
type reducer struct {
	// run: the reducer runs, as attempt.
	run     bool
	attempt int
	// outcome is how an earlier run of the reducer ended (run false).
	outcome fanout.Outcome
	// interrupted, when set, says why the reducer, cut off in an earlier
	// life of the parent, does not run again: the parent ends interrupted.
	interrupted string
}

// reducerStep decides parent c's reducer from prev, what an earlier life
// of the parent left of it (nil: it never began, and runs as attempt 1).
// A reducer that ended is not run again: its outcome stands. One left
// running is killed if anything of it is left and recorded interrupted;
// an interrupted reducer runs again, as its next attempt, only under
// on_interrupt retry while attempts remain.
func (rt *Runtime) reducerStep(ctx context.Context, j *job.Job, c job.Claim, prev *ledger.Run) reducer {
	if prev == nil {
		return reducer{run: true, attempt: 1}
	}
	switch prev.State {
	case ledger.StateSucceeded:
		return reducer{outcome: fanout.Succeeded}
	case ledger.StateFailed, ledger.StateCancelled:
		return reducer{outcome: fanout.Failed}
	}
	if !prev.State.Terminal() {
		rt.interruptChild(ctx, j, c, *prev)
	}
	switch {
	case j.OnInterrupt != job.InterruptRetry:
		return reducer{interrupted: "reducer interrupted: not run again (on_interrupt record)"}
	case prev.Attempt >= j.Retry.Attempts():
		return reducer{interrupted: fmt.Sprintf("reducer interrupted: no retry left (%d attempts)", prev.Attempt)}
	}
	return reducer{run: true, attempt: prev.Attempt + 1}
}

// interruptChild kills what is left of child or reducer run r of a dead
// parent and records it interrupted, under the token of its attempt.
func (rt *Runtime) interruptChild(ctx context.Context, j *job.Job, c job.Claim, r ledger.Run) {
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, _ = runner.KillRun(kctx, r.RunID, nil)
	cancel()
	e := rt.entry(j, rt.now(), mark{r.RunID, ledger.StateInterrupted, c.Slot, Trigger(c.Trigger), "interrupted: the parent's owner is gone"})
	e.Role, e.ParentRunID, e.Item, e.Attempt, e.Token, e.Output = r.Role, c.RunID, r.Item, r.Attempt, r.Token, r.Output
	rt.record(e)
}

// childToken is the ledger token of a child attempt: the parent's attempt
// and the child's, so every attempt's lines fold apart even when a parent
// runs its children again.
func childToken(c job.Claim, attempt int) uint64 { return uint64(c.Attempt)<<20 | uint64(attempt) }

// child is one run under a fanout parent: item index (-1: the reducer),
// its item and its attempt.
type child struct {
	index   int
	item    string
	attempt int
}

// runChild runs one child attempt (or the reducer) of parent c, with its
// own run id, ledger lines and output file.
func (rt *Runtime) runChild(ctx context.Context, j *job.Job, c job.Claim, ch child) fanout.Outcome {
	f := j.Fanout
	id, role := fanout.ReducerRunID(c.RunID), ledger.RoleReducer
	payload := runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "", Env: map[string]string{}}}
	if ch.index >= 0 {
		id, role = fanout.ChildRunID(c.RunID, ch.index), ledger.RoleChild
		payload = childPayload(j.Payload, f.ItemVar, ch.item)
	} else {
		payload.Shell.Command = f.Reducer.Command
		if j.Payload.Shell != nil {
			payload.Shell.Dir = j.Payload.Shell.Dir
			for k, v := range j.Payload.Shell.Env {
				payload.Shell.Env[k] = v
			}
		}
	}
	if payload.Shell != nil {
		payload.Shell.Env[EnvParentRunID] = c.RunID
	}
	line := func(st ledger.State, reason string) ledger.Entry {
		e := rt.entry(j, rt.now(), mark{id, st, c.Slot, Trigger(c.Trigger), reason})
		e.Role, e.ParentRunID, e.Item, e.Attempt, e.Token = role, c.RunID, ch.item, ch.attempt, childToken(c, ch.attempt)
		e.Runner = payload.Kind
		return e
	}
	rel := filepath.Join("output", j.ID, id+".log")
	out := &outputFile{path: filepath.Join(rt.cfg.Home, rel)}
	e := line(ledger.StateRunning, "")
	e.Output = rel
	rt.record(e)
	cctx := ctx
	if f.PerItemTimeout > 0 && ch.index >= 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeoutCause(ctx, f.PerItemTimeout.Std(), fmt.Errorf("per-item timeout after %s", f.PerItemTimeout.Std()))
		defer cancel()
	}
	req := rt.childRequest(j, c, ch, payload)
	req.RunID = id
	req.Output, req.Stderr = capped(out, rt.cfg.OutputCap)
	res := rt.runGraceful(cctx, req)
	if cerr := out.Close(); cerr != nil && res.Err == nil {
		res.Err = cerr
	}
	st, outcome, reason := ledger.StateSucceeded, fanout.Succeeded, ""
	if res.Err != nil {
		st, outcome, reason = ledger.StateFailed, fanout.Failed, res.Err.Error()
		if cause := context.Cause(cctx); cause != nil {
			reason = fmt.Sprintf("%v (%v)", res.Err, cause)
		}
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCancelled):
		st, outcome, reason = ledger.StateCancelled, fanout.Stopped, "cancelled: the parent was cancelled"
	case errors.Is(cause, errShutdown):
		st, outcome, reason = ledger.StateInterrupted, fanout.Stopped, "interrupted: "+errShutdown.Error()
	}
	e = line(st, reason)
	e.Output, e.ExitCode = rel, res.ExitCode
	if res.Err != nil {
		e.Error = res.Err.Error()
	}
	rt.record(e)
	return outcome
}

// childRequest is the runner's request for child ch (or the reducer) of
// parent c, without its run id and output: a child's item is in Fanout
// and, with the parent's run id, in Env, for a runner of any kind. The
// children and the reducer of a chain step carry its chain (Chain and the
// CHRONOS_CHAIN_* variables) as the step's own run would.
func (rt *Runtime) childRequest(j *job.Job, c job.Claim, ch child, payload runner.Payload) runner.Request {
	req := runner.Request{JobID: j.ID, FireAt: c.Slot, Attempt: ch.attempt, Payload: payload, Chain: j.Chain.Clone(),
		Env: RunEnv(rt.cfg.Home, j)}
	if ch.index >= 0 {
		req.Fanout = &runner.FanoutItem{ParentRunID: c.RunID, Index: ch.index, Item: ch.item, Var: j.Fanout.ItemVar}
		req.Env[j.Fanout.ItemVar] = ch.item
		req.Env[EnvParentRunID] = c.RunID
	}
	return req
}

// childPayload is p for one item: a shell payload gets the item in
// itemVar; an http payload gets "${itemVar}" in its URL and body replaced
// by the item.
func childPayload(p runner.Payload, itemVar, item string) runner.Payload {
	c := p
	switch {
	case p.Shell != nil:
		sh := *p.Shell
		sh.Env = make(map[string]string, len(p.Shell.Env)+2)
		for k, v := range p.Shell.Env {
			sh.Env[k] = v
		}
		sh.Env[itemVar] = item
		c.Shell = &sh
	case p.HTTP != nil:
		h := *p.HTTP
		h.URL = replaceVar(h.URL, itemVar, item)
		h.Body = replaceVar(h.Body, itemVar, item)
		c.HTTP = &h
	}
	return c
}

func replaceVar(s, name, value string) string {
	return strings.ReplaceAll(s, "${"+name+"}", value)
}

// runGraceful runs req; when ctx ends, the run's process group gets
// SIGTERM first and the runner's kill (SIGKILL of everything left) comes
// StopGrace later, unless the run ended meanwhile.
func (rt *Runtime) runGraceful(ctx context.Context, req runner.Request) runner.Result {
	rn, err := rt.runners.Get(req.Payload.Kind)
	if err != nil {
		return runner.Result{Err: err}
	}
	hard, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	var (
		mu     sync.Mutex
		leader int
	)
	req.Processes = func(ps []runner.Process) {
		mu.Lock()
		if len(ps) > 0 && leader == 0 {
			leader = ps[0].PID
		}
		mu.Unlock()
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		mu.Lock()
		pid := leader
		mu.Unlock()
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
		t := time.NewTimer(StopGrace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			cancel(context.Cause(ctx))
		}
	})
	res := rn.Run(hard, req)
	close(done)
	wg.Wait()
	if res.Err != nil && ctx.Err() != nil {
		res.Err = fmt.Errorf("%w (stopped: %w)", res.Err, context.Cause(ctx))
	}
	return res
}
