package provider_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/contract"
)

func TestComputePlanFlex(t *testing.T) {
	t.Parallel()
	withFlex := func(a contract.ArmedJob, s int64) contract.ArmedJob { a.FlexSeconds = s; return a }
	want := []agent.Desired{{JobID: "a", FireAt: at(time.Hour), Flex: 10 * time.Minute}}
	tests := []struct {
		name    string
		desired []agent.Desired
		armed   []contract.ArmedJob
		known   []provider.Arm
		want    string // "provision" or "unchanged"
	}{
		{"the same window listed", want, []contract.ArmedJob{withFlex(armed("a", at(time.Hour)), 600)}, nil, "unchanged"},
		{"another window listed", want, []contract.ArmedJob{withFlex(armed("a", at(time.Hour)), 300)}, nil, "provision"},
		{"a window listed, none wanted", []agent.Desired{{JobID: "a", FireAt: at(time.Hour)}},
			[]contract.ArmedJob{withFlex(armed("a", at(time.Hour)), 300)}, nil, "provision"},
		{"none listed, none known: unknown", want, []contract.ArmedJob{armed("a", at(time.Hour))}, nil, "unchanged"},
		{"none listed, the same provisioned", want, []contract.ArmedJob{armed("a", at(time.Hour))},
			[]provider.Arm{{JobID: "a", FireAt: at(time.Hour), FlexSeconds: 600}}, "unchanged"},
		{"none listed, none provisioned", want, []contract.ArmedJob{armed("a", at(time.Hour))},
			[]provider.Arm{{JobID: "a", FireAt: at(time.Hour)}}, "provision"},
		{"none listed, another provisioned", want, []contract.ArmedJob{armed("a", at(time.Hour))},
			[]provider.Arm{{JobID: "a", FireAt: at(time.Hour), FlexSeconds: 300}}, "provision"},
		{"none listed, known for another fire: unknown", want, []contract.ArmedJob{armed("a", at(time.Hour))},
			[]provider.Arm{{JobID: "a", FireAt: at(2 * time.Hour)}}, "unchanged"},
		{"listed beats known", want, []contract.ArmedJob{withFlex(armed("a", at(time.Hour)), 600)},
			[]provider.Arm{{JobID: "a", FireAt: at(time.Hour), FlexSeconds: 300}}, "unchanged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := provider.ComputePlanKnown(tt.desired, nil, tt.armed, tt.known, callback, t0)
			got := "unchanged"
			if len(p.Provision) == 1 {
				got = "provision"
				if w := int64(tt.desired[0].Flex / time.Second); p.Provision[0].FlexSeconds != w {
					t.Fatalf("provision flex %d, want %d", p.Provision[0].FlexSeconds, w)
				}
			} else if len(p.Unchanged) != 1 {
				t.Fatalf("plan %+v", p)
			}
			if got != tt.want {
				t.Fatalf("plan %+v: %s, want %s", p, got, tt.want)
			}
		})
	}
	// ComputePlan knows nothing provisioned: an absent window is unknown.
	if p := provider.ComputePlan(want, nil, []contract.ArmedJob{armed("a", at(time.Hour))}, callback, t0); len(p.Unchanged) != 1 {
		t.Fatalf("ComputePlan %+v", p)
	}
}

// flexNAS is an in-memory NAS that keeps each fire's window and lists it
// back only when listsFlex is set (a NAS that predates windows does not).
type flexNAS struct {
	mu         sync.Mutex
	listsFlex  bool
	arms       map[string]contract.ArmedJob
	provisions []contract.ProvisionRequest
}

func (n *flexNAS) List(context.Context) (nasclient.Listing, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var l nasclient.Listing
	for _, a := range n.arms {
		if !n.listsFlex {
			a.FlexSeconds = 0
		}
		l.Armed = append(l.Armed, a)
	}
	return l, nil
}

func (n *flexNAS) Provision(_ context.Context, req contract.ProvisionRequest) (contract.ProvisionResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.provisions = append(n.provisions, req)
	id := "sch_" + req.JobID + "_" + contract.FormatTime(req.FireAt.Time)
	n.arms[req.JobID] = contract.ArmedJob{JobID: req.JobID, FireAt: req.FireAt, ScheduleID: id, AgentCallbackURL: req.AgentCallbackURL, FlexSeconds: req.FlexSeconds}
	return contract.ProvisionResponse{ScheduleID: id, FireAt: req.FireAt, Armed: true}, nil
}

func (n *flexNAS) Cancel(_ context.Context, jobID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.arms, jobID)
	return nil
}

func (n *flexNAS) AckFailedFires(context.Context, []string) (int, error) { return 0, nil }

// take returns the provisions made since the last take, as "job:flex".
func (n *flexNAS) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, p := range n.provisions {
		out = append(out, fmt.Sprintf("%s:%d", p.JobID, p.FlexSeconds))
	}
	n.provisions = nil
	return out
}

// TestReconcileFlex: a job's window is provisioned with its fire, a change of
// it is provisioned again, and a NAS that does not list windows back causes
// no provision loop, while a change of window still reaches it once.
func TestReconcileFlex(t *testing.T) {
	t.Parallel()
	for _, lists := range []bool{true, false} {
		t.Run(fmt.Sprintf("NAS lists flex_seconds %v", lists), func(t *testing.T) {
			t.Parallel()
			clk := &clock{t: t0}
			home := t.TempDir()
			rt, err := agent.Open(context.Background(), agent.Config{Home: home, Now: clk.Now, Logger: slog.New(slog.DiscardHandler),
				Runners: map[string]runner.Runner{"count": &counter{runs: map[string]int{}}}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rt.Close(context.Background()) })
			nas := &flexNAS{listsFlex: lists, arms: map[string]contract.ArmedJob{}}
			rec, err := provider.NewReconciler(provider.ReconcilerConfig{Source: rt, NAS: nas, CallbackURL: callback, Home: home,
				Now: clk.Now, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			reconcile := func(want string) {
				t.Helper()
				if _, err := rec.Reconcile(context.Background()); err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprint(nas.take()); got != want {
					t.Fatalf("provisioned %s, want %s", got, want)
				}
			}
			for _, spec := range []agent.JobSpec{{ID: "f", Schedule: "every 1h", Flex: 10 * time.Minute}, {ID: "p", Schedule: "every 1h"}} {
				spec.Payload = runner.Payload{Kind: "count"}
				if _, _, err := rt.AddJob(context.Background(), spec); err != nil {
					t.Fatal(err)
				}
			}
			reconcile("[f:600 p:0]")
			reconcile("[]")
			reconcile("[]")
			edit := func(d time.Duration) {
				t.Helper()
				if _, _, err := rt.EditJob(context.Background(), "f", agent.JobPatch{Flex: &d}); err != nil {
					t.Fatal(err)
				}
			}
			edit(20 * time.Minute)
			reconcile("[f:1200]")
			reconcile("[]")
			edit(0)
			reconcile("[f:0]")
			reconcile("[]")
			edit(5 * time.Minute)
			reconcile("[f:300]")
			reconcile("[]")
			st, err := provider.ReadState(home)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range st.Armed {
				if want := map[string]int64{"f": 300, "p": 0}[a.JobID]; a.FlexSeconds != want {
					t.Errorf("state armed %+v, want flex %d", a, want)
				}
			}
		})
	}
}

// TestRefreshPointHasNoFlex: a slot beyond the horizon is armed as a
// refresh fire, without the job's window (it is no slot).
func TestRefreshPointHasNoFlex(t *testing.T) {
	t.Parallel()
	clk := &clock{t: t0}
	home := t.TempDir()
	rt, err := agent.Open(context.Background(), agent.Config{Home: home, Now: clk.Now, Logger: slog.New(slog.DiscardHandler),
		Runners: map[string]runner.Runner{"count": &counter{runs: map[string]int{}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	nas := &flexNAS{listsFlex: true, arms: map[string]contract.ArmedJob{}}
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{Source: rt, NAS: nas, CallbackURL: callback, Home: home,
		Now: clk.Now, Logger: slog.New(slog.DiscardHandler), Horizon: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []agent.JobSpec{{ID: "far", Schedule: "in 5h", Flex: time.Hour}, {ID: "near", Schedule: "in 1h", Flex: time.Hour}} {
		spec.Payload = runner.Payload{Kind: "count"}
		if _, _, err := rt.AddJob(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rec.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(nas.take()); got != "[far:0 near:3600]" {
		t.Fatalf("provisioned %s", got)
	}
	if _, err := rec.Reconcile(context.Background()); err != nil || len(nas.take()) != 0 {
		t.Fatalf("second reconcile: %v", err)
	}
}

// TestBackstopWaitsForTheWindow: while NAS holds a flex job's fire, the
// backstop leaves the slot to NAS until the window's end plus the grace;
// only then does it hand the slot to the misfire policy.
func TestBackstopWaitsForTheWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	j, _, err := b.rt.AddJob(context.Background(), agent.JobSpec{ID: "f", Schedule: "every 1h", Grace: time.Minute, Flex: 20 * time.Minute,
		Payload: runner.Payload{Kind: "count"}})
	if err != nil {
		t.Fatal(err)
	}
	slot := *j.NextRunAt
	b.reconcile(t)
	b.clock.Set(slot.Add(20 * time.Minute)) // the window's end: NAS may still deliver
	if res := b.reconcile(t); res.CaughtUp || len(res.Delivering) != 1 {
		t.Fatalf("inside the window: %+v", res)
	}
	if n := b.next(t, "f"); !n.Equal(slot) {
		t.Fatalf("the slot was taken over inside the window: next %v", n)
	}
	b.clock.Set(slot.Add(21*time.Minute + time.Second)) // beyond the window and the grace
	if res := b.reconcile(t); !res.CaughtUp {
		t.Fatalf("beyond the window: %+v", res)
	}
	if n := b.next(t, "f"); !n.After(slot) {
		t.Fatalf("the slot was not taken over: next %v", n)
	}
}

// TestReconcileFlexWithoutState: with no state to remember what it
// provisioned, a reconciler facing a NAS that does not list windows takes
// the absent window as unknown: it provisions the fire once and then leaves
// it, never in a loop.
func TestReconcileFlexWithoutState(t *testing.T) {
	t.Parallel()
	clk := &clock{t: t0}
	rt, err := agent.Open(context.Background(), agent.Config{Home: t.TempDir(), Now: clk.Now, Logger: slog.New(slog.DiscardHandler),
		Runners: map[string]runner.Runner{"count": &counter{runs: map[string]int{}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	nas := &flexNAS{arms: map[string]contract.ArmedJob{}}
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{Source: rt, NAS: nas, CallbackURL: callback,
		Now: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.AddJob(context.Background(), agent.JobSpec{ID: "f", Schedule: "every 1h", Flex: 10 * time.Minute,
		Payload: runner.Payload{Kind: "count"}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"[f:600]", "[]", "[]"} {
		if _, err := rec.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(nas.take()); got != want {
			t.Fatalf("reconcile %d provisioned %s, want %s", i+1, got, want)
		}
	}
}
