package recorder_test

import (
	"context"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	"github.com/chronoscron/chronos/relay/recorder"
)

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		out  relay.Outcome
		want string
	}{
		{"delivered", relay.Outcome{Kind: relay.Done, Reason: "delivered: accepted"}, relay.HistoryDelivered},
		{"delivered in process", relay.Outcome{Kind: relay.Done, Record: &relay.LastFire{Outcome: relay.LastFireDelivered}}, relay.HistoryDelivered},
		{"stale", relay.Outcome{Kind: relay.Done, Reason: "dropped: job was re-armed"}, relay.HistoryDropped},
		{"duplicate", relay.Outcome{Kind: relay.Done, Reason: "duplicate"}, relay.HistoryDropped},
		{"instance stopped", relay.Outcome{Kind: relay.Done, Reason: "instance_stopped"}, relay.HistoryInstanceStopped},
		{"instance stopped in process", relay.Outcome{Kind: relay.Done, Record: &relay.LastFire{Outcome: relay.LastFireInstanceStopped}}, relay.HistoryInstanceStopped},
		{"retry", relay.Outcome{Kind: relay.Retry, Reason: "agent unreachable"}, relay.HistoryRetry},
		{"no verdict", relay.Outcome{}, relay.HistoryRetry},
		{"dead", relay.Outcome{Kind: relay.Dead, Reason: "rejected by the agent"}, relay.HistoryRejected},
	}
	for _, tt := range tests {
		if got := recorder.OutcomeOf(tt.out); got != tt.want {
			t.Errorf("%s: OutcomeOf = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestRecorderFlush wraps a deliverer, delivers three fires and checks
// what one flush wrote: the minute's counts and lag, the agent's recent
// deliveries and the process's beat with its last claim.
func TestRecorderFlush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := memory.New(memory.Options{})
	t.Cleanup(func() { _ = e.Close() })
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	rec := recorder.New(e, recorder.Options{Kind: "relay", Dispatchers: 2, Now: func() time.Time { return now }})
	verdicts := []relay.Outcome{{Kind: relay.Done, Reason: "delivered"}, {Kind: relay.Retry, Reason: "agent unreachable"}, {Kind: relay.Dead, Reason: "rejected"}}
	i := 0
	d := rec.Wrap(relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		i++
		return verdicts[i-1]
	}))
	for n := range verdicts {
		d.Deliver(ctx, relay.Lease{OneShot: relay.OneShot{AgentID: "a", JobID: "j", ScheduleID: "s", FireAt: now.Add(-30 * time.Millisecond), Attempt: n + 1}})
	}
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	minutes, err := e.HistoryMinutes(ctx, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil || len(minutes) != 1 {
		t.Fatalf("minutes %+v %v", minutes, err)
	}
	m := minutes[0]
	if m.Outcomes[relay.HistoryDelivered] != 1 || m.Outcomes[relay.HistoryRetry] != 1 || m.Outcomes[relay.HistoryRejected] != 1 ||
		m.Retries != 2 || m.Lag[relay.LagBucket(30*time.Millisecond)] != 1 {
		t.Fatalf("minute %+v", m)
	}
	recent, err := e.RecentDeliveries(ctx, "a", 0)
	if err != nil || len(recent) != 3 || recent[0].Outcome != relay.HistoryRejected || recent[2].Lag != 30*time.Millisecond {
		t.Fatalf("recent %+v %v", recent, err)
	}
	procs, err := e.Processes(ctx, now.Add(-time.Minute))
	if err != nil || len(procs) != 1 || procs[0].ID != rec.ID() || procs[0].Dispatchers != 2 || !procs[0].LastClaim.Equal(now) || procs[0].Delivered != 1 {
		t.Fatalf("processes %+v %v", procs, err)
	}
	// A second flush with nothing new adds nothing.
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if minutes, _ := e.HistoryMinutes(ctx, now.Add(-time.Hour), now.Add(time.Hour)); minutes[0].Outcomes[relay.HistoryDelivered] != 1 {
		t.Fatalf("after a second flush: %+v", minutes[0])
	}
}
