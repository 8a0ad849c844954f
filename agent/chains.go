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
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
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

// targets returns the alert targets of class.
func (c ChainConfig) targets(class string) []notify.Target {
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

// StartChain validates spec and, under the store lock, starts the chain
// and stores its first step's job in one write. A refusal wraps
// chain.ErrDuplicate, chain.ErrBreakerOpen or chain.ErrLimit and is in the
// ledger; invalid input wraps ErrInvalidJob and writes nothing.
func (rt *Runtime) StartChain(ctx context.Context, spec ChainStart) (ChainStep, error) {
	now := rt.now()
	req, err := rt.startRequest(spec, now)
	if err != nil {
		return ChainStep{}, err
	}
	j, err := rt.stepJob(spec.Step, now)
	if err != nil {
		return ChainStep{}, err
	}
	req.FireAt = *j.NextRunAt
	if exp := cmp.Or(req.ExpiresAt, now.Add(req.Limits.Lifetime.Std())); !exp.After(req.FireAt) {
		return ChainStep{}, fmt.Errorf("%w: the chain would expire at %s, before its first step at %s", ErrInvalidJob,
			exp.UTC().Format(time.RFC3339), req.FireAt.UTC().Format(time.RFC3339))
	}
	var out ChainStep
	var refused error
	p := &plan{}
	err = rt.store.Update(ctx, func(st *store.State) error {
		*p, refused = plan{}, nil
		br := st.LookupBreaker(req.Class)
		if br != nil && br.Settle(now) {
			p.lines = append(p.lines, rt.breakerLine(br, ledger.ChainBreakerClosed, "cooldown over", now))
		}
		open := 0
		for _, c := range st.Chains() {
			if c.Class == req.Class && c.Open() {
				open++
			}
		}
		if refused = chain.CheckStart(req, st.Chain(req.ID), open, br); refused != nil {
			ref := &ledger.ChainRef{ID: req.ID, Class: req.Class, Stage: req.Stage}
			p.lines = append(p.lines, rt.refusedLine(ref, refused, "start refused: ", now))
			st.Breaker(req.Class).NoteRefusal(refused)
			return nil
		}
		c := chain.New(req)
		step := c.Steps[0]
		j.ID, j.Chain, j.Name = step.JobID, c.Meta(step), stepName(c, step)
		if err := st.Add(j); err != nil {
			return err
		}
		if err := st.AddChain(c); err != nil {
			return err
		}
		st.Breaker(c.Class).NoteSpawn(now)
		p.lines = append(p.lines, rt.chainLine(stepRef(c, step), ledger.ChainStarted,
			fmt.Sprintf("started; first step %s at %s; expires %s", step.JobID, step.FireAt.Format(time.RFC3339), c.ExpiresAt.Format(time.RFC3339)), now))
		out = ChainStep{Chain: c.Clone(), Job: j.Clone()}
		return nil
	})
	if err != nil {
		return ChainStep{}, fmt.Errorf("agent: chain start: %w", err)
	}
	rt.apply(ctx, p)
	if refused != nil {
		return ChainStep{}, fmt.Errorf("agent: chain start: %w", refused)
	}
	rt.signal()
	return out, nil
}

// startRequest validates the start's names and limits.
func (rt *Runtime) startRequest(spec ChainStart, now time.Time) (chain.StartRequest, error) {
	bad := func(err error) error { return fmt.Errorf("%w: %w", ErrInvalidJob, err) }
	if err := chain.ValidName("class", spec.Class); err != nil {
		return chain.StartRequest{}, bad(err)
	}
	if err := chain.ValidName("stage", spec.Stage); err != nil {
		return chain.StartRequest{}, bad(err)
	}
	lim := rt.cfg.Chains.Policy(spec.Class).Limits
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
		id = chain.DefaultID(spec.Class, now, rt.cfg.Location, lim.Lifetime.Std())
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
func (rt *Runtime) stepJob(s StepSpec, now time.Time) (*job.Job, error) {
	j, sched, err := newJob(JobSpec{ID: "chain-step", Schedule: s.Schedule, Payload: s.Payload, Timeout: s.Timeout}, now, rt.jobEnv())
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
func (rt *Runtime) SpawnStep(ctx context.Context, spec ChainSpawn) (ChainStep, error) {
	now := rt.now()
	if spec.Stage != "" || !spec.Retry {
		if err := chain.ValidName("stage", spec.Stage); err != nil {
			return ChainStep{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	j, err := rt.stepJob(spec.Step, now)
	if err != nil {
		return ChainStep{}, err
	}
	var out ChainStep
	var refused error
	p := &plan{}
	err = rt.store.Update(ctx, func(st *store.State) error {
		*p, refused = plan{}, nil
		c := st.Chain(spec.ChainID)
		if c == nil {
			return fmt.Errorf("%w: %q", chain.ErrNotFound, spec.ChainID)
		}
		br := st.Breaker(c.Class)
		if br.Settle(now) {
			p.lines = append(p.lines, rt.breakerLine(br, ledger.ChainBreakerClosed, "cooldown over", now))
		}
		req := chain.SpawnRequest{Stage: spec.Stage, SpawnedBy: spec.SpawnedBy, Retry: spec.Retry, FireAt: *j.NextRunAt, Now: now}
		step, err := c.PlanSpawn(req, br, rt.cfg.Chains.Policy(c.Class).SpawnStorm)
		if errors.Is(err, chain.ErrInvalid) {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
		if err != nil {
			refused = err
			return rt.refuseSpawn(st, c, err, now, p)
		}
		j.ID, j.Chain, j.Name = step.JobID, c.Meta(step), stepName(c, step)
		if err := st.Add(j); err != nil {
			return err
		}
		c.AddStep(step)
		br.NoteSpawn(now)
		p.lines = append(p.lines, rt.chainLine(stepRef(c, step), ledger.ChainSpawned,
			fmt.Sprintf("spawned %s by %s at %s", step.JobID, step.SpawnedBy, step.FireAt.Format(time.RFC3339)), now))
		out = ChainStep{Chain: c.Clone(), Job: j.Clone()}
		return nil
	})
	if err != nil {
		return ChainStep{}, fmt.Errorf("agent: chain spawn: %w", err)
	}
	rt.apply(ctx, p)
	if refused != nil {
		return ChainStep{}, fmt.Errorf("agent: chain spawn: %w", refused)
	}
	rt.signal()
	return out, nil
}

// refuseSpawn records a refused spawn and closes the chain when the
// refusal says so. The caller holds the store lock.
func (rt *Runtime) refuseSpawn(st *store.State, c *chain.Chain, err error, now time.Time, p *plan) error {
	ref := &ledger.ChainRef{ID: c.ID, Class: c.Class}
	p.lines = append(p.lines, rt.refusedLine(ref, err, "spawn refused: ", now))
	st.Breaker(c.Class).NoteRefusal(err)
	if !c.Open() {
		return nil
	}
	var lim *chain.LimitError
	switch {
	case errors.As(err, &lim):
		rt.closeChain(st, c, chain.Closing{Reason: "limit: " + lim.Limit, Outcome: chain.OutcomeFailure, Trigger: chain.TriggerLimit}, now, p)
	case errors.Is(err, chain.ErrBreakerOpen):
		rt.closeChain(st, c, chain.Closing{Reason: chain.ReasonBreakerOpen, Outcome: chain.OutcomeFailure, Trigger: chain.TriggerBreaker}, now, p)
	case errors.Is(err, chain.ErrExpired):
		rt.closeChain(st, c, chain.Closing{Reason: chain.ReasonExpired, Outcome: chain.OutcomeFailure, Trigger: chain.TriggerExpiry}, now, p)
	}
	return nil
}

// CloseChain closes a chain by hand (or from a step): pending steps are
// cancelled (their jobs removed, so the reconcile cancels them at NAS). With
// CoolingDown it tapers instead and closes at the end of it. A closed
// chain is refused with chain.ErrClosed.
func (rt *Runtime) CloseChain(ctx context.Context, spec ChainClose) (chain.Chain, error) {
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
	now := rt.now()
	var out chain.Chain
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		*p = plan{}
		c := st.Chain(spec.ChainID)
		if c == nil {
			return fmt.Errorf("%w: %q", chain.ErrNotFound, spec.ChainID)
		}
		if !c.Open() {
			return fmt.Errorf("%w: chain %s closed at %s, reason %s", chain.ErrClosed, c.ID, c.ClosedAt.Format(time.RFC3339), c.ClosedReason)
		}
		if spec.CoolingDown > 0 {
			if err := c.CoolDown(now, spec.CoolingDown, how); err != nil {
				return err
			}
			p.lines = append(p.lines, rt.chainLine(&ledger.ChainRef{ID: c.ID, Class: c.Class}, ledger.ChainCoolingDown,
				fmt.Sprintf("cooling down for %s, then closes: %s", spec.CoolingDown, reason), now))
		} else {
			rt.closeChain(st, c, how, now, p)
		}
		out = c.Clone()
		return nil
	})
	if err != nil {
		return chain.Chain{}, fmt.Errorf("agent: chain close: %w", err)
	}
	rt.apply(ctx, p)
	rt.signal()
	return out, nil
}

// Chains returns copies of the chains f selects, oldest first. An unknown
// state wraps ErrInvalidJob.
func (rt *Runtime) Chains(ctx context.Context, f ChainFilter) ([]chain.Chain, error) {
	if f.State != "" {
		if _, err := chain.ParseState(string(f.State)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	out := []chain.Chain{}
	err := rt.store.View(ctx, func(st *store.State) error {
		for _, c := range st.Chains() {
			if (f.Class == "" || c.Class == f.Class) && (f.State == "" || c.State == f.State) {
				out = append(out, c.Clone())
			}
		}
		return nil
	})
	return out, err
}

// Chain returns a copy of the chain with id (an error wraps
// chain.ErrNotFound).
func (rt *Runtime) Chain(ctx context.Context, id string) (chain.Chain, error) {
	var out chain.Chain
	err := rt.store.View(ctx, func(st *store.State) error {
		c := st.Chain(id)
		if c == nil {
			return fmt.Errorf("agent: %w: %q", chain.ErrNotFound, id)
		}
		out = c.Clone()
		return nil
	})
	return out, err
}

// Breakers returns copies of the class breakers, ordered by class.
func (rt *Runtime) Breakers(ctx context.Context) ([]chain.Breaker, error) {
	out := []chain.Breaker{}
	err := rt.store.View(ctx, func(st *store.State) error {
		for _, b := range st.Breakers() {
			out = append(out, b.Clone())
		}
		return nil
	})
	return out, err
}

// ResetBreaker closes the breaker of class by hand and clears its failure
// streak (a ledger line says so). A class without a breaker record is
// chain.ErrNotFound.
func (rt *Runtime) ResetBreaker(ctx context.Context, class string) (chain.Breaker, error) {
	now := rt.now()
	var out chain.Breaker
	p := &plan{}
	err := rt.store.Update(ctx, func(st *store.State) error {
		*p = plan{}
		b := st.LookupBreaker(class)
		if b == nil {
			return fmt.Errorf("%w: class %q has no breaker", chain.ErrNotFound, class)
		}
		was := b.State
		b.Reset()
		p.lines = append(p.lines, rt.breakerLine(b, ledger.ChainBreakerReset, "reset by hand (was "+string(was)+")", now))
		out = b.Clone()
		return nil
	})
	if err != nil {
		return chain.Breaker{}, fmt.Errorf("agent: breaker reset: %w", err)
	}
	rt.apply(ctx, p)
	return out, nil
}

// stepName is the name of a step's job, so `jobs list` shows its chain.
func stepName(c *chain.Chain, s chain.Step) string {
	return fmt.Sprintf("chain %s: %s (depth %d, attempt %d)", c.ID, s.Stage, s.Depth, s.Attempt)
}
