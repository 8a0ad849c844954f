package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/chronoscron/chronos/agent/internal/notices"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// Plan collects what one store update decided; it is carried out (apply)
// after the update is durable.
type Plan struct {
	lines   []ledger.Entry
	starts  []runs.Start
	cancels []string // local run ids to stop (replaced)
	reg     []string // run ids registered during the update
	kills   []kill   // what is left of runs whose owner died
	owed    bool     // notifications joined a job's outbound rows
	refused error    // why a chain step was not run (see Admission.admitStep)
	// orphans are fanout parents recorded interrupted without being
	// resumed: their children and reducer left running end too.
	orphans []runs.Start
}

// Reset empties p, for an update callback that may run again.
func (p *Plan) Reset() { *p = Plan{} }

// Lines returns how many ledger lines p writes.
func (p *Plan) Lines() int { return len(p.lines) }

// kill names a run of a dead owner on this host whose processes must be
// killed before anything else happens to its slot.
type kill struct {
	jobID, runID string
	procs        []runner.Process
}

// endRun puts line e, which ends a run of j without it running to an
// answer (missed, interrupted), in p and stores the notifications it owes
// on j, in the same write.
func (p *Plan) endRun(j *job.Job, e ledger.Entry) {
	p.lines = append(p.lines, e)
	if notices.Owe(j, e, notify.Run{}) {
		p.owed = true
	}
}

// unregister drops the runs p registered, for an update that was not
// committed.
func (e *env) unregister(p *Plan) {
	e.Runs.Unregister(p.reg)
	p.reg = nil
}

var errReplaced = errors.New("replaced by a newer run (overlap replace)")

// apply carries out a committed plan: the processes of runs whose owner
// died are killed first (before their slot can run again), then the ledger
// lines are written (or held until they can be), then cancellations and
// starts.
func (e *env) apply(ctx context.Context, p *Plan) {
	e.killLeftovers(ctx, p.kills)
	for _, o := range p.orphans {
		e.Exec.EndSteps(ctx, &o.Job, o.Claim)
	}
	lines := p.lines
	for i, s := range p.starts {
		// A run that starts now has its running line written with the
		// plan's: one write and one sync for a fire's claim and its start.
		if e.Runs.Active(s.Claim.RunID, s.Claim.Token) {
			lines = append(lines, e.lines.Running(s, e.now()))
			p.starts[i].Announced = true
		}
	}
	e.Lines.Record(lines...)
	if p.owed {
		e.Notices.HandOverNow(ctx)
	}
	for _, id := range p.cancels {
		e.Runs.Cancel(id, errReplaced)
	}
	for _, s := range p.starts {
		e.Exec.Start(s)
	}
	if len(p.lines) > 0 || len(p.starts) > 0 {
		e.Signal()
	}
}

// planKill plans to kill what is left of claim c of a dead owner on this
// host. Processes of another boot are long gone, and those of another pid
// namespace are not ours to find: neither is looked for.
func (e *env) planKill(j *job.Job, c job.Claim, p *Plan) {
	if c.OwnerBoot != "" && e.Where.Boot != "" && c.OwnerBoot != e.Where.Boot ||
		c.OwnerNS != "" && e.Where.NS != "" && c.OwnerNS != e.Where.NS {
		return
	}
	p.kills = append(p.kills, kill{jobID: j.ID, runID: c.RunID, procs: c.Procs})
}

// killLeftovers kills what is left of runs whose owner died: their recorded
// processes, their process group and every process naming the run in its
// environment (see runner.KillRun).
func (e *env) killLeftovers(ctx context.Context, kills []kill) {
	for _, k := range kills {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		n, err := runner.KillRun(kctx, k.runID, k.procs)
		cancel()
		switch {
		case err != nil:
			e.Log.Error("killing what is left of an interrupted run failed", "job_id", k.jobID, "run_id", k.runID, "killed", n, "error", err)
		case n > 0:
			e.Log.Warn("killed what was left of an interrupted run", "job_id", k.jobID, "run_id", k.runID, "processes", n)
		}
	}
}
