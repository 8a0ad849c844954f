package chain

import (
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 24, 9, 30, 0, 0, time.UTC)

func newChain(t *testing.T, lim Limits) *Chain {
	t.Helper()
	return New(StartRequest{ID: "disk-1", Class: "disk", Stage: "action", Limits: lim, FireAt: t0.Add(3 * time.Minute), Now: t0})
}

// spawn adds a step planned from req, failing the test on a refusal.
func spawn(t *testing.T, c *Chain, req SpawnRequest) Step {
	t.Helper()
	if req.Now.IsZero() {
		req.Now = t0.Add(time.Minute)
	}
	s, err := c.PlanSpawn(req, nil, 0)
	if err != nil {
		t.Fatalf("spawn %+v: %v", req, err)
	}
	c.AddStep(s)
	return s
}

func TestNewChainIsArmedWithItsFirstStep(t *testing.T) {
	c := newChain(t, DefaultLimits())
	if c.State != StateArmed || len(c.Transitions) != 1 || c.Transitions[0] != (Transition{From: StateIdle, To: StateArmed, At: t0, Trigger: TriggerStart}) {
		t.Fatalf("state %s, transitions %+v", c.State, c.Transitions)
	}
	s := c.Steps[0]
	if s.JobID != "disk-1.action.1.1" || s.Depth != 1 || s.Attempt != 1 || s.Status != StepPending || c.Children != 1 {
		t.Fatalf("first step %+v, children %d", s, c.Children)
	}
	if !c.ExpiresAt.Equal(t0.Add(DefaultLifetime)) {
		t.Fatalf("expires %s", c.ExpiresAt)
	}
	m := c.Meta(s)
	if m.ChainID != "disk-1" || m.ChainClass != "disk" || m.MaxDepth != 4 || m.MaxChildren != 8 || !m.ExpiresAt.Equal(c.ExpiresAt) {
		t.Fatalf("meta %+v", m)
	}
}

func TestCheckStart(t *testing.T) {
	closedAt := t0.Add(-time.Hour)
	openBreaker := &Breaker{Class: "disk", State: BreakerOpen, ResumeAt: ptr(t0.Add(time.Minute)), Reason: "3 failures"}
	spentBreaker := &Breaker{Class: "disk", State: BreakerOpen, ResumeAt: ptr(t0), Reason: "3 failures"}
	req := StartRequest{ID: "disk-1", Class: "disk", Stage: "action", Limits: DefaultLimits(), Now: t0}
	for _, tc := range []struct {
		name     string
		existing *Chain
		open     int
		br       *Breaker
		want     error
	}{
		{"first", nil, 0, nil, nil},
		{"running", &Chain{ID: "disk-1", State: StateActive}, 1, nil, ErrDuplicate},
		{"handled", &Chain{ID: "disk-1", State: StateClosed, ClosedAt: &closedAt, ClosedReason: "done"}, 0, nil, ErrDuplicate},
		{"breaker open", nil, 0, openBreaker, ErrBreakerOpen},
		{"breaker past its resume time", nil, 0, spentBreaker, nil},
		{"two open of three", nil, 2, nil, nil},
		{"max_concurrent", nil, 3, nil, ErrLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStart(req, tc.existing, tc.open, tc.br)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSpawnPlacesDepthAndAttempt(t *testing.T) {
	c := newChain(t, DefaultLimits())
	v := spawn(t, c, SpawnRequest{Stage: "verify", SpawnedBy: "disk-1.action.1.1"})
	if v.JobID != "disk-1.verify.2.1" || v.Depth != 2 || v.Attempt != 1 || v.SpawnedBy != "disk-1.action.1.1" {
		t.Fatalf("verify %+v", v)
	}
	c.StepEnded(Step{JobID: v.JobID, Status: StepFailed}, t0.Add(2*time.Minute))
	r := spawn(t, c, SpawnRequest{Retry: true, SpawnedBy: v.JobID})
	if r.JobID != "disk-1.verify.2.2" || r.Stage != "verify" || r.Depth != 2 || r.Attempt != 2 {
		t.Fatalf("retry %+v", r)
	}
	// Without a spawner the latest step spawns.
	m := spawn(t, c, SpawnRequest{Stage: "monitor"})
	if m.Depth != 3 || m.SpawnedBy != r.JobID {
		t.Fatalf("monitor %+v", m)
	}
	if c.Children != 4 || c.DepthReached != 3 || c.Attempts["verify"] != 2 {
		t.Fatalf("counts children %d depth %d attempts %v", c.Children, c.DepthReached, c.Attempts)
	}
}

func TestSpawnRefusals(t *testing.T) {
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name  string
		lim   Limits
		setup func(c *Chain)
		br    *Breaker
		storm int
		req   SpawnRequest
		want  error
		limit string
	}{
		{name: "depth", lim: Limits{MaxDepth: 1, MaxChildren: 8, MaxRetries: 3, Lifetime: Duration(time.Hour), MaxConcurrent: 3},
			req: SpawnRequest{Stage: "verify"}, want: ErrLimit, limit: LimitDepth},
		{name: "children", lim: Limits{MaxDepth: 4, MaxChildren: 1, MaxRetries: 3, Lifetime: Duration(time.Hour), MaxConcurrent: 3},
			req: SpawnRequest{Stage: "verify"}, want: ErrLimit, limit: LimitChildren},
		{name: "retries", lim: Limits{MaxDepth: 4, MaxChildren: 8, MaxRetries: 0, Lifetime: Duration(time.Hour), MaxConcurrent: 3},
			setup: func(c *Chain) { c.Steps[0].Status = StepFailed },
			req:   SpawnRequest{Retry: true}, want: ErrLimit, limit: LimitRetries},
		{name: "storm", lim: DefaultLimits(), br: &Breaker{Spawns: []time.Time{now.Add(-30 * time.Second), now.Add(-10 * time.Second)}},
			storm: 2, req: SpawnRequest{Stage: "verify"}, want: ErrLimit, limit: LimitSpawnStorm},
		{name: "storm counts the last minute only", lim: DefaultLimits(), br: &Breaker{Spawns: []time.Time{now.Add(-2 * time.Minute), now.Add(-10 * time.Second)}},
			storm: 2, req: SpawnRequest{Stage: "verify"}},
		{name: "duplicate of a pending step", lim: DefaultLimits(), req: SpawnRequest{Retry: true, Stage: "action"},
			setup: func(c *Chain) { c.Attempts["action"] = 0 }, want: ErrDuplicate},
		{name: "breaker open", lim: DefaultLimits(), br: &Breaker{State: BreakerOpen, ResumeAt: ptr(now.Add(time.Hour))},
			req: SpawnRequest{Stage: "verify"}, want: ErrBreakerOpen},
		{name: "closed", lim: DefaultLimits(), setup: func(c *Chain) { c.Close(now, Closing{Reason: "done", Outcome: OutcomeSuccess}) },
			req: SpawnRequest{Stage: "verify"}, want: ErrClosed},
		{name: "expired", lim: Limits{MaxDepth: 4, MaxChildren: 8, MaxRetries: 3, Lifetime: Duration(time.Minute), MaxConcurrent: 3},
			req: SpawnRequest{Stage: "verify"}, want: ErrExpired},
		{name: "unknown spawner", lim: DefaultLimits(), req: SpawnRequest{Stage: "verify", SpawnedBy: "nope"}, want: ErrInvalid},
		{name: "nothing to retry", lim: DefaultLimits(), req: SpawnRequest{Stage: "verify", Retry: true}, want: ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChain(t, tc.lim)
			if tc.setup != nil {
				tc.setup(c)
			}
			before := c.Clone()
			tc.req.Now = now
			_, err := c.PlanSpawn(tc.req, tc.br, tc.storm)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == errAny && err == nil, tc.want != nil && tc.want != errAny && !errors.Is(err, tc.want):
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var le *LimitError
			if tc.limit != "" && (!errors.As(err, &le) || le.Limit != tc.limit) {
				t.Fatalf("limit %v, want %s", err, tc.limit)
			}
			if len(c.Steps) != len(before.Steps) || c.Children != before.Children {
				t.Fatal("PlanSpawn changed the chain")
			}
		})
	}
}

var errAny = errors.New("any error")

func TestDeduplicationAllowsTheNextAttempt(t *testing.T) {
	c := newChain(t, DefaultLimits())
	v := spawn(t, c, SpawnRequest{Stage: "verify"})
	if _, err := c.PlanSpawn(SpawnRequest{Stage: "verify", SpawnedBy: "disk-1.action.1.1", Now: t0}, nil, 0); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second verify attempt 1 while one is pending: %v", err)
	}
	c.StepEnded(Step{JobID: v.JobID, Status: StepFailed}, t0.Add(time.Minute))
	if _, err := c.PlanSpawn(SpawnRequest{Stage: "verify", SpawnedBy: "disk-1.action.1.1", Now: t0}, nil, 0); err != nil {
		t.Fatalf("the same key once the step ended: %v", err)
	}
}

func TestLifecycleTransitions(t *testing.T) {
	c := newChain(t, DefaultLimits())
	c.StepStarted("disk-1.action.1.1", "r1", t0.Add(3*time.Minute))
	v := spawn(t, c, SpawnRequest{Stage: "verify", SpawnedBy: "disk-1.action.1.1"})
	if c.StepEnded(Step{JobID: "disk-1.action.1.1", Status: StepSucceeded, RunID: "r1"}, t0.Add(4*time.Minute)) {
		t.Fatal("closed with a pending verify step")
	}
	c.StepStarted(v.JobID, "r2", t0.Add(5*time.Minute))
	if !c.StepEnded(Step{JobID: v.JobID, Status: StepSucceeded, RunID: "r2"}, t0.Add(6*time.Minute)) {
		t.Fatal("not closed after the last step succeeded")
	}
	var got []State
	for _, tr := range c.Transitions {
		got = append(got, tr.To)
	}
	if !slices.Equal(got, []State{StateArmed, StateActive, StateClosed}) || c.ClosedReason != ReasonDone || c.Outcome != OutcomeSuccess {
		t.Fatalf("transitions %v, closed %q %s", got, c.ClosedReason, c.Outcome)
	}
	if !slices.Equal(c.RunIDs(), []string{"r1", "r2"}) {
		t.Fatalf("run ids %v", c.RunIDs())
	}
}

func TestFailedLastStepClosesAsFailure(t *testing.T) {
	c := newChain(t, DefaultLimits())
	c.StepStarted("disk-1.action.1.1", "r1", t0)
	if !c.StepEnded(Step{JobID: "disk-1.action.1.1", Status: StepFailed}, t0) || c.ClosedReason != "step failed: action" || c.Outcome != OutcomeFailure {
		t.Fatalf("closed %q %s", c.ClosedReason, c.Outcome)
	}
}

func TestCoolDownAndExpiry(t *testing.T) {
	c := newChain(t, DefaultLimits())
	c.StepStarted("disk-1.action.1.1", "r1", t0)
	c.StepEnded(Step{JobID: "disk-1.action.1.1", Status: StepSucceeded}, t0)
	// The last step's end closed it; a fresh chain tapers instead.
	c = newChain(t, DefaultLimits())
	c.StepStarted("disk-1.action.1.1", "r1", t0)
	m := spawn(t, c, SpawnRequest{Stage: "monitor"})
	if err := c.CoolDown(t0, 15*time.Minute, Closing{Reason: "resolved", Outcome: OutcomeSuccess}); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.Deadline(); !d.Equal(t0.Add(15 * time.Minute)) {
		t.Fatalf("deadline %s", d)
	}
	if _, ok := c.Due(t0.Add(14 * time.Minute)); ok {
		t.Fatal("closed before the taper's end")
	}
	ids, ok := c.Due(t0.Add(15 * time.Minute))
	if !ok || !slices.Equal(ids, []string{m.JobID}) || c.ClosedReason != "resolved" || c.Outcome != OutcomeSuccess {
		t.Fatalf("taper end: %v %v %q %s", ids, ok, c.ClosedReason, c.Outcome)
	}
	if c.Step(m.JobID).Status != StepCancelled {
		t.Fatalf("pending monitor step %s", c.Step(m.JobID).Status)
	}
	e := newChain(t, Limits{MaxDepth: 4, MaxChildren: 8, MaxRetries: 3, Lifetime: Duration(time.Minute), MaxConcurrent: 3})
	ids, ok = e.Due(t0.Add(time.Minute))
	if !ok || !slices.Equal(ids, []string{"disk-1.action.1.1"}) || e.ClosedReason != ReasonExpired || e.Outcome != OutcomeFailure {
		t.Fatalf("expiry: %v %v %q %s", ids, ok, e.ClosedReason, e.Outcome)
	}
	if e.Transitions[len(e.Transitions)-1].Trigger != TriggerExpiry {
		t.Fatalf("trigger %+v", e.Transitions)
	}
}

func failed(id, run string) *Chain {
	at := t0
	return &Chain{ID: id, Class: "disk", State: StateClosed, ClosedAt: &at, ClosedReason: "step failed: verify", Outcome: OutcomeFailure,
		Steps: []Step{{JobID: id + ".verify.2.1", RunID: run}}}
}

func TestBreakerOpensOnConsecutiveFailuresWithinTheWindow(t *testing.T) {
	p := DefaultPolicy()
	b := &Breaker{Class: "disk", State: BreakerClosed}
	if _, opened := b.RecordClose(failed("a", "r1"), p, t0); opened {
		t.Fatal("opened after one failure")
	}
	// Two failures, then a success clears the streak.
	b.RecordClose(failed("b", "r2"), p, t0.Add(time.Minute))
	b.RecordClose(&Chain{ID: "c", Outcome: OutcomeSuccess}, p, t0.Add(2*time.Minute))
	if len(b.Failures) != 0 {
		t.Fatalf("failures after a success %v", b.Failures)
	}
	// Failures older than the window drop out.
	b.RecordClose(failed("d", "r4"), p, t0)
	b.RecordClose(failed("e", "r5"), p, t0.Add(31*time.Minute))
	if _, opened := b.RecordClose(failed("f", "r6"), p, t0.Add(32*time.Minute)); opened {
		t.Fatal("opened with a failure outside the window")
	}
	o, opened := b.RecordClose(failed("g", "r7"), p, t0.Add(33*time.Minute))
	if !opened || b.State != BreakerOpen || !slices.Equal(o.RunIDs, []string{"r5", "r6", "r7"}) || b.Openings != 1 {
		t.Fatalf("opening %+v %v, breaker %+v", o, opened, b)
	}
	now := t0.Add(33 * time.Minute)
	if !b.ResumeAt.Equal(now.Add(time.Hour)) || !b.IsOpen(now.Add(59*time.Minute)) || b.IsOpen(now.Add(time.Hour)) {
		t.Fatalf("resume at %s", b.ResumeAt)
	}
	if b.Settle(now.Add(59 * time.Minute)) {
		t.Fatal("settled before the cooldown")
	}
	if !b.Settle(now.Add(time.Hour)) || b.State != BreakerClosed || len(b.Failures) != 0 {
		t.Fatalf("after the cooldown %+v", b)
	}
}

func TestBreakerOpensOnAViolation(t *testing.T) {
	b := &Breaker{Class: "disk", State: BreakerClosed}
	c := failed("a", "r1")
	c.ClosedReason = "limit: max_children"
	c.Transitions = []Transition{{From: StateActive, To: StateClosed, At: t0, Trigger: TriggerLimit}}
	if !c.Violated() {
		t.Fatal("a chain closed by a limit is no violation")
	}
	o, opened := b.RecordClose(c, DefaultPolicy(), t0)
	if !opened || b.State != BreakerOpen || !slices.Equal(o.RunIDs, []string{"r1"}) {
		t.Fatalf("violation: %+v %v", o, opened)
	}
	if !b.Reset() || b.State != BreakerClosed || b.Reset() {
		t.Fatal("reset")
	}
}

func TestDefaultIDIsStableWithinALifetimeWindow(t *testing.T) {
	loc := time.FixedZone("X", 3600)
	a := DefaultID("disk", time.Date(2026, 11, 24, 13, 31, 0, 0, loc), loc, 90*time.Minute)
	b := DefaultID("disk", time.Date(2026, 11, 24, 14, 59, 0, 0, loc), loc, 90*time.Minute)
	c := DefaultID("disk", time.Date(2026, 11, 24, 15, 0, 0, 0, loc), loc, 90*time.Minute)
	if a != "disk-20261124-09" || a != b || c != "disk-20261124-10" {
		t.Fatalf("ids %s %s %s", a, b, c)
	}
	if err := ValidID(a); err != nil {
		t.Fatal(err)
	}
}

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"defaults", DefaultPolicy().Validate()},
		{"bad class", ValidName("class", "a.b")},
		{"bad depth", Limits{MaxDepth: 0, MaxChildren: 1, Lifetime: Duration(time.Hour), MaxConcurrent: 1}.Validate()},
		{"bad lifetime", Limits{MaxDepth: 1, MaxChildren: 1, Lifetime: 0, MaxConcurrent: 1}.Validate()},
		{"bad storm", Policy{Limits: DefaultLimits(), BreakerFailures: 3, BreakerWindow: time.Hour, BreakerCooldown: time.Hour}.Validate()},
	} {
		if (tc.name == "defaults") != (tc.err == nil) {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
}

func TestExitCodes(t *testing.T) {
	for err, want := range map[error]int{ErrDuplicate: 3, &LimitError{Limit: LimitDepth}: 4, ErrBreakerOpen: 5, ErrClosed: 6, ErrExpired: 6, errAny: 0} {
		if got := ExitCode(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}

func ptr(t time.Time) *time.Time { return &t }
