package postgres_test

import (
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/postgres"
	"github.com/chronoscron/chronos/relay/relaytest"
)

// TestNextDueOfHeldFires: held fires count as due now only while their
// agent has room for them (a dispatcher would otherwise claim again and
// again while the agent is at its parallelism), and at their agent's gate.
func TestNextDueOfHeldFires(t *testing.T) {
	t.Parallel()
	clock := relaytest.NewClock(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	e := newEngine(t, postgres.Options{Now: clock.Now})
	ctx := testCtx(t)
	at := clock.Now().Add(-time.Second)
	for _, job := range []string{"j1", "j2", "j3"} {
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: job, FireAt: at, ScheduleID: t.Name() + job}); err != nil {
			t.Fatal(err)
		}
	}
	flow := relay.Flow{Parallelism: 1}
	next := func(what string, want time.Duration, wantOK bool) {
		t.Helper()
		wait, ok, err := e.NextDue(ctx)
		if err != nil || ok != wantOK || (ok && wait != want) {
			t.Fatalf("%s: next due %s, %v, %v; want %s, %v", what, wait, ok, err, want, wantOK)
		}
	}
	ls, err := e.Claim(ctx, 10, time.Minute, flow)
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %d, %v", len(ls), err)
	}
	next("at the agent's parallelism", 0, false)
	if err := e.Ack(ctx, ls[0]); err != nil {
		t.Fatal(err)
	}
	next("after an ack freed room", 0, true)

	// A Down delivery holds the agent: its gate is the next due time.
	ls, err = e.Claim(ctx, 10, time.Minute, flow)
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim after the ack: %d, %v", len(ls), err)
	}
	if err := e.Down(ctx, ls[0], time.Hour, 5*time.Second, "refused"); err != nil {
		t.Fatal(err)
	}
	next("after a Down", 5*time.Second, true)
	clock.Advance(5 * time.Second)
	next("at the gate", 0, true)
	probe, err := e.Claim(ctx, 10, time.Minute, flow)
	if err != nil || len(probe) != 1 || probe[0].AgentFailures != 1 {
		t.Fatalf("probe: %+v, %v", probe, err)
	}
	next("while the probe is in flight", time.Hour-5*time.Second, true)

	// A disabled agent's held fires are due never.
	if err := e.SetAgentPolicy(ctx, "a1", relay.AgentPolicy{Disabled: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.Ack(ctx, probe[0]); err != nil {
		t.Fatal(err)
	}
	next("disabled", time.Hour-5*time.Second, true)
}

// TestAgentFlowsForgetCancelledHolds: an agent whose held fires were all
// cancelled is listed no more, though its flag is cleared only by the next
// claim that meets it.
func TestAgentFlowsForgetCancelledHolds(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	ctx := testCtx(t)
	armNow(t, e, []string{"a1"}, 3)
	ls, err := e.Claim(ctx, 10, time.Minute, relay.Flow{Parallelism: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %d, %v", len(ls), err)
	}
	flows, err := e.AgentFlows(ctx)
	if err != nil || len(flows) != 1 || flows[0].Held != 2 {
		t.Fatalf("agent flows with held fires: %+v, %v", flows, err)
	}
	for _, job := range []string{"j001", "j002"} {
		if ok, err := e.Cancel(ctx, "a1", job); err != nil || !ok {
			t.Fatalf("cancel %s: %v, %v", job, ok, err)
		}
	}
	flows, err = e.AgentFlows(ctx)
	if err != nil || len(flows) != 0 {
		t.Fatalf("agent flows after cancelling the held fires: %+v, %v", flows, err)
	}
	if err := e.Ack(ctx, ls[0]); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.NextDue(ctx); err != nil {
		t.Fatal(err)
	} else if ok {
		// The stale flag makes it due now once: the claim clears it.
		if got, err := e.Claim(ctx, 10, time.Minute, relay.Flow{Parallelism: 1}); err != nil || len(got) != 0 {
			t.Fatalf("claim of nothing: %d, %v", len(got), err)
		}
	}
	if _, ok, err := e.NextDue(ctx); err != nil || ok {
		t.Fatalf("next due with nothing armed: %v, %v", ok, err)
	}
}
