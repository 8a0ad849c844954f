// Package execute runs the claimed runs of one agent process: the runner of
// a run's payload is chosen once, its job kind (plain, workflow, fanout)
// decides around it what the run does, its output goes to its output file,
// its lease is renewed while it runs, and its end is handed to the
// Settler.
package execute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/inputs"
	"github.com/chronoscron/chronos/agent/internal/held"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// Config is what runs are run with.
type Config struct {
	Home      string
	OutputCap int64
	LeaseTTL  time.Duration
	Now       func() time.Time
	Log       *slog.Logger
	Store     *store.Store
	Ledger    *ledger.Ledger
	Runners   *runner.Registry
	Inputs    *inputs.Set
	Runs      *runs.Registry
	Lines     *held.Lines
	Owner     string
	// Settler stores each run's end.
	Settler Settler
}

// Settler stores how a run ended (see Ended); it reports whether the end
// is stored as this process's (not given up, not discarded).
type Settler interface {
	Settle(log *slog.Logger, r *runs.Run, o Ended) bool
}

// Ended is how a run ended: its job and claim, its output file (relative
// to the home), the runner's result, the cause its context ended with and
// how long the runner ran.
type Ended struct {
	Job    job.Job
	Claim  job.Claim
	Output string
	Res    runner.Result
	Cause  error
	Took   time.Duration
	// State and Reason, when State is set, are the run's end as its job
	// kind decided it (a workflow skipped, a fanout partial).
	State  ledger.State
	Reason string
	// Fanout counts a fanout parent's children (nil for other runs).
	Fanout *notify.Fanout
}

// Executor runs this process's claimed runs.
type Executor struct {
	cfg   Config
	lines runs.Lines
}

// New returns the executor of cfg.
func New(cfg Config) *Executor {
	return &Executor{cfg: cfg, lines: runs.Lines{Owner: cfg.Owner}}
}

// SetSettler sets the Settler that stores each run's end (it is built
// after the executor).
func (x *Executor) SetSettler(s Settler) { x.cfg.Settler = s }

// Start launches claimed run s in the background, unless its claim is no
// longer this process's.
func (x *Executor) Start(s runs.Start) {
	r := x.cfg.Runs.Get(s.Claim.RunID, s.Claim.Token)
	if r == nil {
		return
	}
	go x.execute(r.Ctx, r, s)
}

// execution is one claimed run being run.
type execution struct {
	x   *Executor
	r   *runs.Run
	s   runs.Start
	out io.Writer
	log *slog.Logger
	// rn is the runner of the payload, chosen once for the run; rerr says
	// why there is none.
	rn   runner.Runner
	rerr error
}

// execute runs one claimed slot: ledger running, the run as its job kind
// says, then its end handed to the Settler under the fencing token.
func (x *Executor) execute(ctx context.Context, r *runs.Run, s runs.Start) {
	defer x.cfg.Runs.End(s.Claim.RunID, r)
	j, c := s.Job, s.Claim
	log := x.cfg.Log.With("job_id", j.ID, "run_id", c.RunID, "fire_at", c.Slot, "attempt", c.Attempt)
	rel := runs.OutputRel(j.ID, c.RunID)
	out := &outputFile{path: filepath.Join(x.cfg.Home, rel)}
	if !s.Announced {
		x.cfg.Lines.Record(x.lines.Running(s, x.cfg.Now()))
	}
	started := x.cfg.Now()
	e := &execution{x: x, r: r, s: s, out: out, log: log}
	e.rn, e.rerr = x.cfg.Runners.Get(j.Payload.Kind)
	o := kindOf(&j).run(ctx, e)
	res := o.res
	if cerr := out.Close(); cerr != nil && res.Err == nil {
		res.Err = cerr
	}
	stored := x.cfg.Settler.Settle(log, r, Ended{Job: j, Claim: c, Output: rel, Res: res, Cause: context.Cause(ctx), Took: x.cfg.Now().Sub(started),
		State: o.state, Reason: o.reason, Fanout: o.fanout})
	if stored && j.JobKind == job.JobKindFanout && !errors.Is(context.Cause(ctx), runs.ErrShutdown) {
		x.dropPlan(c.RunID, log)
	}
}

// runPayload runs the job's payload for its claim under the job's timeout.
func (e *execution) runPayload(ctx context.Context) runner.Result {
	j, c := e.s.Job, e.s.Claim
	if e.rerr != nil {
		return runner.Result{Err: e.rerr}
	}
	runCtx := ctx
	if j.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(ctx, j.Timeout.Std(), fmt.Errorf("timeout after %s", j.Timeout.Std()))
		defer cancel()
	}
	e.log.Info("run started")
	req := runRequest(e.x.cfg.Home, &j, c)
	req.Output, req.Stderr = capped(e.out, e.x.cfg.OutputCap)
	req.Processes = func(ps []runner.Process) { e.x.cfg.Runs.NoteProcs(e.r, ps) }
	res := e.rn.Run(runCtx, req)
	if cause := context.Cause(runCtx); res.Err != nil && cause != nil && !strings.Contains(res.Err.Error(), cause.Error()) {
		res.Err = fmt.Errorf("%w (%w)", res.Err, cause)
	}
	return res
}

// runRequest is the runner's request for claim c of j.
func runRequest(home string, j *job.Job, c job.Claim) runner.Request {
	return runner.Request{JobID: j.ID, RunID: c.RunID, FireAt: c.Slot, Attempt: c.Attempt, Payload: j.Payload,
		Chain: j.Chain.Clone(), Env: RunEnv(home, j)}
}

// capped returns the writers of a run's standard output and standard error
// into out, under one limit of capBytes; stderr is nil (both streams into
// out) when out cannot keep them apart.
func capped(out io.Writer, capBytes int64) (stdout, stderr io.Writer) {
	cw := &runner.CapWriter{W: out, Limit: capBytes}
	if o, ok := out.(interface{ Stderr() io.Writer }); ok {
		return cw, cw.Stream(o.Stderr())
	}
	return cw, nil
}
