package chain

import (
	"fmt"
	"time"
)

// Transition triggers.
const (
	TriggerStart     = "start"
	TriggerStepStart = "step started"
	TriggerStepEnd   = "step ended"
	TriggerClose     = "close"
	TriggerCoolDown  = "cooling down"
	TriggerTaperEnd  = "taper ended"
	TriggerExpiry    = "expiry"
	TriggerLimit     = "limit"
	TriggerBreaker   = "breaker"
)

// Close reasons set by the rules.
const (
	ReasonDone        = "done"
	ReasonExpired     = "expired"
	ReasonBreakerOpen = "breaker open"
)

// StartRequest asks for a new chain and its first step.
type StartRequest struct {
	ID    string
	Class string
	Stage string
	// Limits are the chain's limits (the class's, changed by the start).
	Limits Limits
	// ExpiresAt overrides now + Limits.Lifetime when set.
	ExpiresAt time.Time
	// FireAt is when the first step runs.
	FireAt time.Time
	Now    time.Time
}

// CheckStart decides a start: existing is the chain that has the id (nil
// if none), open the number of open chains of the class and br the class's
// breaker (nil if it has none). It returns nil or an error wrapping
// ErrDuplicate, ErrBreakerOpen or ErrLimit (LimitConcurrent).
func CheckStart(req StartRequest, existing *Chain, open int, br *Breaker) error {
	if existing != nil {
		if existing.Open() {
			return fmt.Errorf("%w: chain %s is already running (%s)", ErrDuplicate, existing.ID, existing.State)
		}
		return fmt.Errorf("%w: chain %s was already handled at %s, reason %s", ErrDuplicate, existing.ID,
			existing.ClosedAt.UTC().Format(time.RFC3339), existing.ClosedReason)
	}
	if br != nil && br.IsOpen(req.Now) {
		return fmt.Errorf("%w: class %s is paused until %s (%s)", ErrBreakerOpen, req.Class, br.ResumeAt.UTC().Format(time.RFC3339), br.Reason)
	}
	if open >= req.Limits.MaxConcurrent {
		return &LimitError{Limit: LimitConcurrent, Detail: fmt.Sprintf("class %s already has %d open chains (max_concurrent %d)", req.Class, open, req.Limits.MaxConcurrent)}
	}
	return nil
}

// New returns the chain req starts, armed, with its first step (depth 1,
// attempt 1) pending.
func New(req StartRequest) *Chain {
	exp := req.ExpiresAt
	if exp.IsZero() {
		exp = req.Now.Add(req.Limits.Lifetime.Std())
	}
	c := &Chain{ID: req.ID, Class: req.Class, State: StateIdle, CreatedAt: req.Now.UTC(), ExpiresAt: exp.UTC(),
		Limits: req.Limits, Attempts: map[string]int{}}
	c.move(StateArmed, req.Now, TriggerStart)
	c.AddStep(Step{JobID: StepJobID(c.ID, req.Stage, 1, 1), Stage: req.Stage, Depth: 1, Attempt: 1,
		Status: StepPending, CreatedAt: req.Now.UTC(), FireAt: req.FireAt.UTC()})
	return c
}

// Meta returns the metadata the job of step s carries.
func (c *Chain) Meta(s Step) *Meta {
	return &Meta{ChainID: c.ID, ChainClass: c.Class, Stage: s.Stage, Depth: s.Depth, Attempt: s.Attempt,
		ExpiresAt: c.ExpiresAt, MaxDepth: c.Limits.MaxDepth, MaxChildren: c.Limits.MaxChildren}
}

func (c *Chain) move(to State, now time.Time, trigger string) {
	if c.State == to {
		return
	}
	c.Transitions = append(c.Transitions, Transition{From: c.State, To: to, At: now.UTC(), Trigger: trigger})
	c.State = to
}

// AddStep records s and moves the counts on.
func (c *Chain) AddStep(s Step) {
	c.Steps = append(c.Steps, s)
	c.Children++
	c.DepthReached = max(c.DepthReached, s.Depth)
	if c.Attempts == nil {
		c.Attempts = map[string]int{}
	}
	c.Attempts[s.Stage] = max(c.Attempts[s.Stage], s.Attempt)
}

// SpawnRequest asks a chain for one more step.
type SpawnRequest struct {
	Stage string
	// SpawnedBy is the job id of the spawning step; empty means the
	// chain's latest step.
	SpawnedBy string
	// Retry asks for the next attempt of Stage (default: the spawner's
	// stage) at that stage's depth.
	Retry  bool
	FireAt time.Time
	Now    time.Time
}

// PlanSpawn decides a spawn without changing c: the step to add, or an
// error wrapping ErrClosed, ErrBreakerOpen, ErrDuplicate or ErrLimit
// (a *LimitError). br is the class's breaker (nil if none), storm the
// class's spawn_storm.
func (c *Chain) PlanSpawn(req SpawnRequest, br *Breaker, storm int) (Step, error) {
	if !c.Open() {
		return Step{}, fmt.Errorf("%w: chain %s closed at %s, reason %s", ErrClosed, c.ID, c.ClosedAt.UTC().Format(time.RFC3339), c.ClosedReason)
	}
	if !req.Now.Before(c.ExpiresAt) {
		return Step{}, fmt.Errorf("%w: chain %s expired at %s", ErrExpired, c.ID, c.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if br != nil && br.IsOpen(req.Now) {
		return Step{}, fmt.Errorf("%w: class %s is paused until %s (%s)", ErrBreakerOpen, c.Class, br.ResumeAt.UTC().Format(time.RFC3339), br.Reason)
	}
	s, err := c.nextStep(req)
	if err != nil {
		return Step{}, err
	}
	for _, o := range c.Steps {
		if o.Status.Open() && o.Stage == s.Stage && o.Attempt == s.Attempt {
			return Step{}, fmt.Errorf("%w: step %s (stage %s, attempt %d) is already %s", ErrDuplicate, o.JobID, o.Stage, o.Attempt, o.Status)
		}
	}
	if lerr := c.checkLimits(s, req.Now, br, storm); lerr != nil {
		return Step{}, lerr
	}
	return s, nil
}

// nextStep places the step req asks for: its stage, depth and attempt.
func (c *Chain) nextStep(req SpawnRequest) (Step, error) {
	if len(c.Steps) == 0 {
		return Step{}, fmt.Errorf("%w: chain %s has no step to spawn from", ErrInvalid, c.ID)
	}
	from := &c.Steps[len(c.Steps)-1]
	if req.SpawnedBy != "" {
		if from = c.Step(req.SpawnedBy); from == nil {
			return Step{}, fmt.Errorf("%w: step %s is not a step of chain %s", ErrInvalid, req.SpawnedBy, c.ID)
		}
	}
	s := Step{Stage: req.Stage, Depth: from.Depth + 1, Attempt: 1, Status: StepPending, SpawnedBy: from.JobID,
		CreatedAt: req.Now.UTC(), FireAt: req.FireAt.UTC()}
	if req.Retry {
		if s.Stage == "" {
			s.Stage = from.Stage
		}
		depth := 0
		for _, o := range c.Steps {
			if o.Stage == s.Stage {
				depth = o.Depth
			}
		}
		if depth == 0 {
			return Step{}, fmt.Errorf("%w: chain %s has no step of stage %s to retry", ErrInvalid, c.ID, s.Stage)
		}
		s.Depth, s.Attempt = depth, c.Attempts[s.Stage]+1
	}
	if s.Stage == "" {
		return Step{}, fmt.Errorf("%w: a spawn needs a stage", ErrInvalid)
	}
	s.JobID = StepJobID(c.ID, s.Stage, s.Depth, s.Attempt)
	return s, nil
}

// checkLimits returns the limit step s would break, or nil.
func (c *Chain) checkLimits(s Step, now time.Time, br *Breaker, storm int) *LimitError {
	l := c.Limits
	switch {
	case s.Depth > l.MaxDepth:
		return &LimitError{Limit: LimitDepth, Detail: fmt.Sprintf("depth %d is past max_depth %d", s.Depth, l.MaxDepth)}
	case c.Children+1 > l.MaxChildren:
		return &LimitError{Limit: LimitChildren, Detail: fmt.Sprintf("step %d is past max_children %d", c.Children+1, l.MaxChildren)}
	case s.Attempt > 1+l.MaxRetries:
		return &LimitError{Limit: LimitRetries, Detail: fmt.Sprintf("attempt %d of stage %s is past max_retries %d", s.Attempt, s.Stage, l.MaxRetries)}
	case br != nil && storm > 0 && br.RecentSpawns(now) >= storm:
		return &LimitError{Limit: LimitSpawnStorm, Detail: fmt.Sprintf("class %s spawned %d steps in the last minute (spawn_storm %d)", c.Class, br.RecentSpawns(now), storm)}
	}
	return nil
}

// StepStarted marks step jobID running with run runID; the first step to
// start makes an armed chain active.
func (c *Chain) StepStarted(jobID, runID string, now time.Time) {
	s := c.Step(jobID)
	if s == nil {
		return
	}
	s.Status, s.RunID, s.StartedAt = StepRunning, runID, utcPtr(now)
	if c.State == StateArmed {
		c.move(StateActive, now, TriggerStepStart+": "+jobID)
	}
}

// StepEnded records the end of step jobID (status, run id, reason, output)
// and closes an armed or active chain that has no open step left: done
// (success) when this step succeeded, "step failed: <stage>" (failure)
// otherwise. It reports whether the chain closed.
func (c *Chain) StepEnded(end Step, now time.Time) bool {
	s := c.Step(end.JobID)
	if s == nil {
		return false
	}
	s.Status, s.EndedAt, s.Reason = end.Status, utcPtr(now), end.Reason
	if end.RunID != "" {
		s.RunID = end.RunID
	}
	if end.Output != "" {
		s.Output = end.Output
	}
	if c.State == StateArmed {
		c.move(StateActive, now, TriggerStepStart+": "+s.JobID)
	}
	if c.State != StateActive || len(c.OpenSteps()) > 0 {
		return false
	}
	if s.Status == StepSucceeded {
		c.Close(now, Closing{Reason: ReasonDone, Outcome: OutcomeSuccess, Trigger: TriggerStepEnd + ": " + s.JobID})
	} else {
		c.Close(now, Closing{Reason: "step failed: " + s.Stage, Outcome: OutcomeFailure, Trigger: TriggerStepEnd + ": " + s.JobID})
	}
	return true
}

// Closing is how a chain closes.
type Closing struct {
	Reason  string
	Outcome Outcome
	Trigger string
}

// Close closes the chain: its pending steps are cancelled (their job ids
// returned, for removal), running ones finish on their own. Closing a
// closed chain does nothing.
func (c *Chain) Close(now time.Time, how Closing) []string {
	if !c.Open() {
		return nil
	}
	var cancelled []string
	for i := range c.Steps {
		if s := &c.Steps[i]; s.Status == StepPending {
			s.Status, s.EndedAt, s.Reason = StepCancelled, utcPtr(now), "chain closed: "+how.Reason
			cancelled = append(cancelled, s.JobID)
		}
	}
	c.ClosedAt, c.ClosedReason, c.Outcome, c.CoolingUntil = utcPtr(now), how.Reason, how.Outcome, nil
	c.move(StateClosed, now, how.Trigger)
	return cancelled
}

// Violated reports whether the chain was closed by a limit: an invariant
// violation.
func (c *Chain) Violated() bool {
	n := len(c.Transitions)
	return c.State == StateClosed && n > 0 && c.Transitions[n-1].Trigger == TriggerLimit
}

// CoolDown starts a taper of d: the chain stays open (monitor spawns are
// allowed) and closes with how at its end.
func (c *Chain) CoolDown(now time.Time, d time.Duration, how Closing) error {
	if !c.Open() {
		return fmt.Errorf("%w: chain %s closed at %s, reason %s", ErrClosed, c.ID, c.ClosedAt.UTC().Format(time.RFC3339), c.ClosedReason)
	}
	c.CoolingUntil = utcPtr(now.Add(d))
	c.ClosedReason, c.Outcome = how.Reason, how.Outcome
	c.move(StateCoolingDown, now, TriggerCoolDown+": "+d.String())
	return nil
}

// Deadline returns the chain's next deadline (its taper's end or its
// expiry) and whether it has one (an open chain always does).
func (c *Chain) Deadline() (time.Time, bool) {
	if !c.Open() {
		return time.Time{}, false
	}
	if c.CoolingUntil != nil && c.CoolingUntil.Before(c.ExpiresAt) {
		return *c.CoolingUntil, true
	}
	return c.ExpiresAt, true
}

// Due closes the chain when a deadline has passed at now: the taper's end
// (with the reason and outcome the cool-down asked for) or the expiry
// (expired, failure). It returns the cancelled steps' job ids and whether
// it closed.
func (c *Chain) Due(now time.Time) ([]string, bool) {
	switch {
	case !c.Open():
		return nil, false
	case c.CoolingUntil != nil && !now.Before(*c.CoolingUntil) && now.Before(c.ExpiresAt):
		return c.Close(now, Closing{Reason: c.ClosedReason, Outcome: c.Outcome, Trigger: TriggerTaperEnd}), true
	case !now.Before(c.ExpiresAt):
		return c.Close(now, Closing{Reason: ReasonExpired, Outcome: OutcomeFailure, Trigger: TriggerExpiry}), true
	}
	return nil, false
}

func utcPtr(t time.Time) *time.Time {
	u := t.UTC()
	return &u
}
