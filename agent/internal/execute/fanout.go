package execute

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
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// StopGrace is how long a stopped fanout child has between SIGTERM and
// SIGKILL.
const StopGrace = 2 * time.Second

// fanoutParent runs the payload once per input item, then the reducer.
type fanoutParent struct{}

// run runs a fanout parent under its job's timeout.
func (fanoutParent) run(ctx context.Context, e *execution) outcome {
	j := e.s.Job
	if j.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, j.Timeout.Std(), fmt.Errorf("timeout after %s", j.Timeout.Std()))
		defer cancel()
	}
	return e.fanout(ctx, &runner.CapWriter{W: e.out, Limit: e.x.cfg.OutputCap})
}

// fanout runs a fanout parent: the plan (resolved and made durable, or
// read back when resuming), its children, its verdict and its reducer,
// writing what it does to out.
func (e *execution) fanout(ctx context.Context, out io.Writer) outcome {
	x, j, c, log := e.x, e.s.Job, e.s.Claim, e.log
	failed := func(err error) outcome {
		fmt.Fprintln(out, err)
		return outcome{res: runner.Result{Err: err}}
	}
	plan, prior, err := x.fanoutPlan(ctx, &j, c, log)
	if err != nil {
		return failed(err)
	}
	fmt.Fprintf(out, "fanout: %d items from %s, concurrency %d\n", len(plan.Items), j.Fanout.InputsFrom, j.Fanout.Concurrency)
	sum := fanout.Execute(ctx, fanout.Config{
		Items: plan.Items, Prior: prior.children, Concurrency: j.Fanout.Concurrency, MaxAttempts: j.Retry.ChildAttempts(),
		Backoff: func(a int) time.Duration { return j.Retry.Delay(a) },
		Run: func(cctx context.Context, i, attempt int) fanout.Outcome {
			return e.runChild(cctx, child{index: i, item: plan.Items[i], attempt: attempt})
		},
	})
	runOn := j.Fanout.ReducerRunOn()
	v := fanout.Judge(sum, j.Fanout.PartialTolerance, runOn)
	counts := fanoutCounts(sum, plan, j.Fanout.PartialTolerance)
	if cause := context.Cause(ctx); cause != nil {
		kr := failed(fmt.Errorf("%s; stopped: %w", v.Reason, cause))
		kr.fanout = counts
		return kr
	}
	fmt.Fprintln(out, v.Reason)
	if j.Fanout.Reducer != nil && v.Reduce {
		step := x.reducerStep(ctx, &j, c, prior.reducer)
		o := step.outcome
		if step.run {
			o = e.runChild(ctx, child{index: -1, attempt: step.attempt})
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
	kr := outcome{state: v.State, reason: v.Reason, fanout: counts}
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

func (x *Executor) dropPlan(runID string, log *slog.Logger) {
	if err := fanout.RemovePlan(x.cfg.Home, runID); err != nil {
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
func (x *Executor) fanoutPlan(ctx context.Context, j *job.Job, c job.Claim, log *slog.Logger) (fanout.Plan, resumed, error) {
	plan, found, err := fanout.ReadPlan(x.cfg.Home, c.RunID)
	if err != nil {
		return plan, resumed{}, err
	}
	if found {
		prior, err := x.fanoutPrior(ctx, j, c, plan)
		log.Info("fanout resumed", "items", len(plan.Items), "finished", len(prior.children), "reducer_began", prior.reducer != nil)
		return plan, prior, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	items, err := x.cfg.Inputs.Resolve(rctx, j.Fanout.InputsFrom)
	if err != nil {
		return plan, resumed{}, fmt.Errorf("fanout: inputs: %w", err)
	}
	plan = fanout.Plan{RunID: c.RunID, JobID: j.ID, CreatedAt: x.cfg.Now().UTC(), Items: items}
	if err := fanout.WritePlan(x.cfg.Home, plan); err != nil {
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
func (x *Executor) fanoutPrior(ctx context.Context, j *job.Job, c job.Claim, plan fanout.Plan) (resumed, error) {
	runs, err := x.cfg.Ledger.Runs(ctx, ledger.Filter{ParentRunID: c.RunID, Since: plan.CreatedAt.Add(-time.Minute)})
	if err != nil {
		return resumed{}, fmt.Errorf("fanout: resume: %w", err)
	}
	index := make(map[string]int, len(plan.Items))
	for i := range plan.Items {
		index[fanout.ChildRunID(c.RunID, i)] = i
	}
	maxA := j.Retry.ChildAttempts()
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
				x.interruptChild(ctx, j, c, r)
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
func (x *Executor) EndSteps(ctx context.Context, j *job.Job, c job.Claim) {
	log := x.cfg.Log.With("job_id", j.ID, "run_id", c.RunID)
	plan, found, err := fanout.ReadPlan(x.cfg.Home, c.RunID)
	if err != nil || !found {
		if err != nil {
			log.Warn("fanout plan of an interrupted parent unreadable", "error", err)
		}
		return
	}
	runs, err := x.cfg.Ledger.Runs(ctx, ledger.Filter{ParentRunID: c.RunID, Since: plan.CreatedAt.Add(-time.Minute)})
	if err != nil {
		// The plan stays: the next start tries again.
		log.Error("steps of an interrupted fanout parent not settled", "error", err)
		return
	}
	for _, r := range runs {
		if !r.State.Terminal() && (r.Role == ledger.RoleChild || r.Role == ledger.RoleReducer) {
			x.interruptChild(ctx, j, c, r)
		}
	}
	x.dropPlan(c.RunID, log)
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
func (x *Executor) reducerStep(ctx context.Context, j *job.Job, c job.Claim, prev *ledger.Run) reducer {
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
		x.interruptChild(ctx, j, c, *prev)
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
func (x *Executor) interruptChild(ctx context.Context, j *job.Job, c job.Claim, r ledger.Run) {
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, _ = runner.KillRun(kctx, r.RunID, nil)
	cancel()
	e := x.lines.Entry(j, x.cfg.Now(), runs.Mark{RunID: r.RunID, State: ledger.StateInterrupted, Slot: c.Slot, Trig: runs.Trigger(c.Trigger), Reason: "interrupted: the parent's owner is gone"})
	e.Role, e.ParentRunID, e.Item, e.Attempt, e.Token, e.Output = r.Role, c.RunID, r.Item, r.Attempt, r.Token, r.Output
	x.cfg.Lines.Record(e)
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
func (ex *execution) runChild(ctx context.Context, ch child) fanout.Outcome {
	x, j, c := ex.x, &ex.s.Job, ex.s.Claim
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
		e := x.lines.Entry(j, x.cfg.Now(), runs.Mark{RunID: id, State: st, Slot: c.Slot, Trig: runs.Trigger(c.Trigger), Reason: reason})
		e.Role, e.ParentRunID, e.Item, e.Attempt, e.Token = role, c.RunID, ch.item, ch.attempt, childToken(c, ch.attempt)
		e.Runner = payload.Kind
		return e
	}
	rel := runs.OutputRel(j.ID, id)
	out := &outputFile{path: filepath.Join(x.cfg.Home, rel)}
	e := line(ledger.StateRunning, "")
	e.Output = rel
	x.cfg.Lines.Record(e)
	cctx := ctx
	if f.PerItemTimeout > 0 && ch.index >= 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeoutCause(ctx, f.PerItemTimeout.Std(), fmt.Errorf("per-item timeout after %s", f.PerItemTimeout.Std()))
		defer cancel()
	}
	req := x.childRequest(j, c, ch, payload)
	req.RunID = id
	req.Output, req.Stderr = capped(out, x.cfg.OutputCap)
	rn, rerr := ex.rn, ex.rerr
	if ch.index < 0 {
		rn, rerr = x.cfg.Runners.Get(runner.KindShell)
	}
	res := runner.Result{Err: rerr}
	if rerr == nil {
		res = runGraceful(cctx, rn, req)
	}
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
	case errors.Is(cause, runs.ErrCancelled):
		st, outcome, reason = ledger.StateCancelled, fanout.Stopped, "cancelled: the parent was cancelled"
	case errors.Is(cause, runs.ErrShutdown):
		st, outcome, reason = ledger.StateInterrupted, fanout.Stopped, "interrupted: "+runs.ErrShutdown.Error()
	}
	e = line(st, reason)
	e.Output, e.ExitCode = rel, res.ExitCode
	if res.Err != nil {
		e.Error = res.Err.Error()
	}
	x.cfg.Lines.Record(e)
	return outcome
}

// childRequest is the runner's request for child ch (or the reducer) of
// parent c, without its run id and output: a child's item is in Fanout
// and, with the parent's run id, in Env, for a runner of any kind. The
// children and the reducer of a chain step carry its chain (Chain and the
// CHRONOS_CHAIN_* variables) as the step's own run would.
func (x *Executor) childRequest(j *job.Job, c job.Claim, ch child, payload runner.Payload) runner.Request {
	req := runner.Request{JobID: j.ID, FireAt: c.Slot, Attempt: ch.attempt, Payload: payload, Chain: j.Chain.Clone(),
		Env: RunEnv(x.cfg.Home, j)}
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
func runGraceful(ctx context.Context, rn runner.Runner, req runner.Request) runner.Result {
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
