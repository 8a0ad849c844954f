// Package lifecycle decides what becomes of a job's slots, each decision
// made in one store update and carried out (Plan) once it is durable:
//
//   - Admission takes a fire or a manual run through the claim's
//     compare-and-set and the job's policies (idempotency window, overlap,
//     misfire, on interrupt) and claims the run;
//   - Settlement stores a run's end under its fencing token, with its
//     retry and the notifications it owes;
//   - Recovery takes over what an earlier agent left (dead owners' claims,
//     owed runs), decides overdue and missed slots, and records the slots
//     a paused job lets pass;
//   - Chains is the one gate chain steps pass: consulted when a step's run
//     is admitted and when it is settled, and the chains' own operations.
//
// Package execute runs what Admission claims; package agent's Runtime is
// the façade over both.
package lifecycle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/internal/execute"
	"github.com/chronoscron/chronos/agent/internal/held"
	"github.com/chronoscron/chronos/agent/internal/notices"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/store"
)

// Config is what slots are decided with.
type Config struct {
	Now      func() time.Time
	Log      *slog.Logger
	Location *time.Location // of jobs that name no zone
	// LeaseTTL is how long a claim lives without renewal.
	LeaseTTL time.Duration
	// MaxCatchUp bounds how many overdue slots misfire run_all runs.
	MaxCatchUp int
	Home       string
	Store      *store.Store
	Ledger     *ledger.Ledger
	Lines      *held.Lines
	Runs       *runs.Registry
	Notices    *notices.Notices
	Exec       *execute.Executor
	Chains     ChainPolicies
	// Self is this process's owner; Where its boot and pid namespace, and
	// SelfStart its start time (clock ticks since boot).
	Self      job.Owner
	Where     runs.Where
	SelfStart uint64
	// Signal tells the runtime's listeners that jobs changed; Subscribe
	// returns a private channel so signalled, and its cancel.
	Signal    func()
	Subscribe func() (chan struct{}, func())
	// Invalid is wrapped by the errors of invalid input (package agent's
	// ErrInvalidJob).
	Invalid error
}

// ChainPolicies are the chain classes' policies and the targets of their
// breaker alerts.
type ChainPolicies interface {
	Policy(class string) chain.Policy
	Targets(class string) []notify.Target
}

// env is what every part reads: the config and this process's lines.
type env struct {
	Config
	lines runs.Lines
}

// Lifecycle is the parts that decide slots, sharing one env.
type Lifecycle struct {
	Admission  *Admission
	Settlement *Settlement
	Recovery   *Recovery
	Chains     *Chains
	env        *env
}

// New returns the parts of cfg.
func New(cfg Config) *Lifecycle {
	e := &env{Config: cfg, lines: runs.Lines{Owner: cfg.Self.String()}}
	gate := &Chains{env: e}
	adm := &Admission{env: e, gate: gate}
	rec := &Recovery{env: e, admit: adm, gate: gate}
	gate.recovery = rec
	return &Lifecycle{
		Admission:  adm,
		Settlement: &Settlement{env: e, admit: adm, gate: gate},
		Recovery:   rec,
		Chains:     gate,
		env:        e,
	}
}

func (e *env) now() time.Time { return e.Now() }

// entry builds the ledger line m of job j, written at now.
func (e *env) entry(j *job.Job, now time.Time, m runs.Mark) ledger.Entry {
	return e.lines.Entry(j, now, m)
}

// liveOwners holds the owner ids of the runtimes open in this process, so
// that one never takes another's live claim for an earlier life of this
// pid.
var liveOwners sync.Map

// Opened and Closed tell that the runtime of owner id opened or closed.
func Opened(id string) { liveOwners.Store(id, struct{}{}) }

// Closed: see Opened.
func Closed(id string) { liveOwners.Delete(id) }

// judge tells whether a claim's owner is this runtime, another one that
// provably runs (on this host), one provably gone, or unknown (the lease
// decides). Another runtime open in this process is alive.
func (e *env) judge(c *job.Claim) runs.Liveness {
	l := runs.Judge(*c, e.Self, e.Where)
	if l == runs.OwnerGone {
		if o, err := job.ParseOwner(c.Owner); err == nil && o.Host == e.Self.Host && o.PID == e.Self.PID {
			if _, live := liveOwners.Load(o.ID); live {
				return runs.OwnerAlive
			}
		}
	}
	return l
}

// Judge is judge for the timer, which wakes for other owners' leases.
func (l *Lifecycle) Judge(c *job.Claim) runs.Liveness { return l.env.judge(c) }

// Apply carries out p, committed (see Plan).
func (l *Lifecycle) Apply(ctx context.Context, p *Plan) { l.env.apply(ctx, p) }

func utcPtr(t time.Time) *time.Time {
	u := t.UTC()
	return &u
}
