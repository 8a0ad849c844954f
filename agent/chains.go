package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/schedule"
)

// ChainConfig is the chains section of the agent's config: the policy of
// each chain class and who hears of a breaker opening.
type ChainConfig struct {
	// Classes are the policies of named classes; a class not listed, and
	// any zero field of a listed one, takes chain.DefaultPolicy's value.
	Classes map[string]ChainClass
	// Notify are the targets of every class's breaker alerts.
	Notify []notify.Target
}

// ChainClass is one class's policy and its own alert targets (beside
// ChainConfig.Notify).
type ChainClass struct {
	Policy chain.Policy
	Notify []notify.Target
}

// Policy returns the effective policy of class.
func (c ChainConfig) Policy(class string) chain.Policy {
	p, d := c.Classes[class].Policy, chain.DefaultPolicy()
	pick := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	pick(&p.Limits.MaxDepth, d.Limits.MaxDepth)
	pick(&p.Limits.MaxChildren, d.Limits.MaxChildren)
	pick(&p.Limits.MaxConcurrent, d.Limits.MaxConcurrent)
	pick(&p.BreakerFailures, d.BreakerFailures)
	pick(&p.SpawnStorm, d.SpawnStorm)
	if c.Classes[class].Policy == (chain.Policy{}) || p.Limits.MaxRetries < 0 {
		p.Limits.MaxRetries = d.Limits.MaxRetries
	}
	if p.Limits.Lifetime == 0 {
		p.Limits.Lifetime = d.Limits.Lifetime
	}
	if p.BreakerWindow == 0 {
		p.BreakerWindow = d.BreakerWindow
	}
	if p.BreakerCooldown == 0 {
		p.BreakerCooldown = d.BreakerCooldown
	}
	return p
}

// chainPolicies are a ChainConfig as the chain gate reads it.
type chainPolicies ChainConfig

// Policy returns the effective policy of class.
func (c chainPolicies) Policy(class string) chain.Policy { return ChainConfig(c).Policy(class) }

// Targets returns the alert targets of class.
func (c chainPolicies) Targets(class string) []notify.Target {
	return append(slices.Clone(c.Notify), c.Classes[class].Notify...)
}

// StepSpec is the job of one chain step: when it runs and what it does.
type StepSpec struct {
	// Schedule is when the step runs once: "in 3m" or a timestamp.
	Schedule string
	// Payload is what it runs.
	Payload runner.Payload
	// Timeout bounds the run (0: none).
	Timeout time.Duration
}

// ChainLimits change a chain's limits at its start; zero fields keep the
// class's.
type ChainLimits struct {
	MaxDepth    int
	MaxChildren int
	// MaxRetries, when not nil, replaces the class's max_retries (0 is
	// allowed: no retry).
	MaxRetries *int
	Lifetime   time.Duration
	// ExpiresAt sets the expiry itself instead of start + lifetime.
	ExpiresAt time.Time
}

// ChainStart asks for a new chain and its first step.
type ChainStart struct {
	// ID is the chain id; empty derives {class}-{YYYYMMDD}-{slot} (see
	// chain.DefaultID).
	ID    string
	Class string
	// Stage is the first step's stage (e.g. action).
	Stage  string
	Step   StepSpec
	Limits ChainLimits
}

// ChainSpawn asks a chain for one more step.
type ChainSpawn struct {
	ChainID string
	// SpawnedBy is the spawning step's job id ($CHRONOS_CHAIN_STEP inside a
	// run); empty means the chain's latest step.
	SpawnedBy string
	// Stage is the new step's stage; with Retry it defaults to the
	// spawner's.
	Stage string
	// Retry asks for the next attempt of the stage, at the stage's depth.
	Retry bool
	Step  StepSpec
}

// ChainClose asks to close a chain.
type ChainClose struct {
	ChainID string
	Reason  string
	// CoolingDown, when positive, tapers instead: the chain stays open
	// (monitor spawns allowed) and closes at the end of it.
	CoolingDown time.Duration
	// Failed closes with outcome failure (default success).
	Failed bool
}

// ChainStep is a chain with the job of the step just added.
type ChainStep struct {
	Chain chain.Chain `json:"chain"`
	Job   job.Job     `json:"job"`
}

// ChainFilter selects chains; zero fields select all.
type ChainFilter struct {
	Class string
	State chain.State
}

// chainOps are the Runtime's chain operations: each validates its input
// and has the chain gate (package lifecycle) do the rest under the store
// lock.
type chainOps struct{ rt *Runtime }

// StartChain validates spec and, under the store lock, starts the chain
// and stores its first step's job in one write. A refusal wraps
// chain.ErrDuplicate, chain.ErrBreakerOpen or chain.ErrLimit and is in the
// ledger; invalid input wraps ErrInvalidJob and writes nothing.
func (o chainOps) StartChain(ctx context.Context, spec ChainStart) (ChainStep, error) {
	now := o.rt.now()
	req, err := o.startRequest(spec, now)
	if err != nil {
		return ChainStep{}, err
	}
	j, err := o.stepJob(spec.Step, now)
	if err != nil {
		return ChainStep{}, err
	}
	req.FireAt = *j.NextRunAt
	if exp := cmp.Or(req.ExpiresAt, now.Add(req.Limits.Lifetime.Std())); !exp.After(req.FireAt) {
		return ChainStep{}, fmt.Errorf("%w: the chain would expire at %s, before its first step at %s", ErrInvalidJob,
			exp.UTC().Format(time.RFC3339), req.FireAt.UTC().Format(time.RFC3339))
	}
	c, sj, err := o.rt.lc.Chains.Start(ctx, req, j)
	if err != nil {
		return ChainStep{}, err
	}
	return ChainStep{Chain: c, Job: sj}, nil
}

// startRequest validates the start's names and limits.
func (co chainOps) startRequest(spec ChainStart, now time.Time) (chain.StartRequest, error) {
	bad := func(err error) error { return fmt.Errorf("%w: %w", ErrInvalidJob, err) }
	if err := chain.ValidName("class", spec.Class); err != nil {
		return chain.StartRequest{}, bad(err)
	}
	if err := chain.ValidName("stage", spec.Stage); err != nil {
		return chain.StartRequest{}, bad(err)
	}
	lim := co.rt.cfg.Chains.Policy(spec.Class).Limits
	o := spec.Limits
	if o.MaxDepth != 0 {
		lim.MaxDepth = o.MaxDepth
	}
	if o.MaxChildren != 0 {
		lim.MaxChildren = o.MaxChildren
	}
	if o.MaxRetries != nil {
		lim.MaxRetries = *o.MaxRetries
	}
	if o.Lifetime != 0 {
		lim.Lifetime = chain.Duration(o.Lifetime)
	}
	if !o.ExpiresAt.IsZero() {
		if o.Lifetime != 0 {
			return chain.StartRequest{}, bad(errors.New("give a lifetime or an expiry time, not both"))
		}
		lim.Lifetime = chain.Duration(o.ExpiresAt.Sub(now).Round(time.Second))
		if lim.Lifetime < chain.Duration(time.Second) {
			return chain.StartRequest{}, bad(fmt.Errorf("expires_at %s is not in the future", o.ExpiresAt.UTC().Format(time.RFC3339)))
		}
	}
	if err := lim.Validate(); err != nil {
		return chain.StartRequest{}, bad(err)
	}
	id := strings.TrimSpace(spec.ID)
	if id == "" {
		id = chain.DefaultID(spec.Class, now, co.rt.cfg.Location, lim.Lifetime.Std())
	}
	if err := chain.ValidID(id); err != nil {
		return chain.StartRequest{}, bad(err)
	}
	return chain.StartRequest{ID: id, Class: spec.Class, Stage: spec.Stage, Limits: lim, ExpiresAt: o.ExpiresAt, Now: now}, nil
}

// StepAt returns the spec of a step that runs command (argv) once, after
// in (a duration like 3m) or at at (a timestamp): exactly one of them.
// Errors wrap ErrInvalidJob.
func StepAt(in, at string, command []string, timeout time.Duration) (StepSpec, error) {
	if (in == "") == (at == "") {
		return StepSpec{}, fmt.Errorf("%w: give the step's time as a delay (in) or a timestamp (at), one of them", ErrInvalidJob)
	}
	p, err := PayloadSpec{Command: command}.Payload()
	if err != nil {
		return StepSpec{}, err
	}
	if in != "" {
		return StepSpec{Schedule: "in " + in, Payload: p, Timeout: timeout}, nil
	}
	return StepSpec{Schedule: at, Payload: p, Timeout: timeout}, nil
}

// stepJob builds the one-shot job of a step (its id and metadata are set
// by the caller).
func (o chainOps) stepJob(s StepSpec, now time.Time) (*job.Job, error) {
	j, sched, err := newJob(JobSpec{ID: "chain-step", Schedule: s.Schedule, Payload: s.Payload, Timeout: s.Timeout}, now, o.rt.jobOps.jobEnv())
	if err != nil {
		return nil, err
	}
	if sched.Kind() != schedule.KindOnce {
		return nil, fmt.Errorf("%w: a chain step runs once: give a schedule like 'in 3m' or a timestamp, not %q", ErrInvalidJob, s.Schedule)
	}
	return j, nil
}

// SpawnStep adds a step to a chain, under the store lock and in one write
// with its job. The limits, the de-duplication and the class's breaker are
// enforced here: a spawn past a limit is refused (chain.ErrLimit) and
// closes the chain "limit: <which>", which opens the class's breaker; a
// spawn while the breaker is open is refused (chain.ErrBreakerOpen) and
// closes the chain "breaker open"; one after the chain's expiry is refused
// (chain.ErrExpired) and closes it "expired"; a duplicate
// (chain.ErrDuplicate) or a spawn into a closed chain (chain.ErrClosed) is
// refused and changes nothing. Every refusal is in the ledger.
func (o chainOps) SpawnStep(ctx context.Context, spec ChainSpawn) (ChainStep, error) {
	now := o.rt.now()
	if spec.Stage != "" || !spec.Retry {
		if err := chain.ValidName("stage", spec.Stage); err != nil {
			return ChainStep{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	j, err := o.stepJob(spec.Step, now)
	if err != nil {
		return ChainStep{}, err
	}
	req := chain.SpawnRequest{Stage: spec.Stage, SpawnedBy: spec.SpawnedBy, Retry: spec.Retry, Now: now}
	c, sj, err := o.rt.lc.Chains.Spawn(ctx, spec.ChainID, req, j)
	if err != nil {
		return ChainStep{}, err
	}
	return ChainStep{Chain: c, Job: sj}, nil
}

// CloseChain closes a chain by hand (or from a step): pending steps are
// cancelled (their jobs removed, so the reconcile cancels them at NAS). With
// CoolingDown it tapers instead and closes at the end of it. A closed
// chain is refused with chain.ErrClosed.
func (o chainOps) CloseChain(ctx context.Context, spec ChainClose) (chain.Chain, error) {
	if spec.CoolingDown < 0 {
		return chain.Chain{}, fmt.Errorf("%w: cooling-down %s must not be negative", ErrInvalidJob, spec.CoolingDown)
	}
	reason := strings.TrimSpace(spec.Reason)
	if reason == "" || len(reason) > 500 || !utf8.ValidString(reason) {
		return chain.Chain{}, fmt.Errorf("%w: a close needs a reason of at most 500 bytes of UTF-8 text", ErrInvalidJob)
	}
	how := chain.Closing{Reason: reason, Outcome: chain.OutcomeSuccess, Trigger: chain.TriggerClose}
	if spec.Failed {
		how.Outcome = chain.OutcomeFailure
	}
	return o.rt.lc.Chains.Close(ctx, spec.ChainID, how, spec.CoolingDown)
}

// Chains returns copies of the chains f selects, oldest first. An unknown
// state wraps ErrInvalidJob.
func (o chainOps) Chains(ctx context.Context, f ChainFilter) ([]chain.Chain, error) {
	if f.State != "" {
		if _, err := chain.ParseState(string(f.State)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	return o.rt.lc.Chains.List(ctx, f.Class, f.State)
}

// Chain returns a copy of the chain with id (an error wraps
// chain.ErrNotFound).
func (o chainOps) Chain(ctx context.Context, id string) (chain.Chain, error) {
	return o.rt.lc.Chains.Get(ctx, id)
}

// Breakers returns copies of the class breakers, ordered by class.
func (o chainOps) Breakers(ctx context.Context) ([]chain.Breaker, error) {
	return o.rt.lc.Chains.Breakers(ctx)
}

// ResetBreaker closes the breaker of class by hand and clears its failure
// streak (a ledger line says so). A class without a breaker record is
// chain.ErrNotFound.
func (o chainOps) ResetBreaker(ctx context.Context, class string) (chain.Breaker, error) {
	return o.rt.lc.Chains.Reset(ctx, class)
}

// NextChainDeadline returns the earliest time something about chains is
// due: an open chain's expiry or taper end, or an open breaker's resume
// time. ok is false when nothing is.
func (o chainOps) NextChainDeadline(ctx context.Context) (time.Time, bool, error) {
	return o.rt.lc.Chains.NextDeadline(ctx)
}

// SweepChains closes the chains whose deadline has passed (expired:
// pending steps cancelled, their jobs removed so the reconcile cancels them
// at NAS; a taper's end) and closes the breakers whose cooldown is over.
// It reports how many chains it closed. A sweep with nothing due writes
// nothing.
func (o chainOps) SweepChains(ctx context.Context) (int, error) { return o.rt.lc.Chains.Sweep(ctx) }

// RunChainSweeper sweeps chains (SweepChains) at each chain deadline and
// after every change, until ctx ends. RunTimer runs it; a serving agent
// with another provider runs it itself.
func (o chainOps) RunChainSweeper(ctx context.Context) error { return o.rt.lc.Chains.RunSweeper(ctx) }
