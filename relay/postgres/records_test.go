package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/postgres"
)

// separateLookup is what LookupDelivery must agree with: FirstDelivery, then
// for a first delivery Get and InstanceStopped of the row's instance.
func separateLookup(ctx context.Context, e *postgres.Engine, id string, ttl time.Duration, agent, job string) (relay.DeliveryInfo, error) {
	first, err := e.FirstDelivery(ctx, id, ttl)
	if err != nil || !first {
		return relay.DeliveryInfo{}, err
	}
	info := relay.DeliveryInfo{First: true}
	row, err := e.Get(ctx, agent, job)
	switch {
	case errors.Is(err, relay.ErrNotFound):
		return info, nil
	case err != nil:
		return relay.DeliveryInfo{}, err
	}
	info.Found, info.Row = true, row
	info.Stopped, err = e.InstanceStopped(ctx, row.InstanceID)
	return info, err
}

// TestLookupDeliveryAgreesWithSeparateCalls compares LookupDelivery with
// the three calls it stands for, over the states a fire's row can be in:
// not armed, armed, armed for direct delivery with a window, leased, of a
// stopped instance; and a delivery id seen before.
func TestLookupDeliveryAgreesWithSeparateCalls(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.Now().Add(-time.Second).Truncate(time.Microsecond).Add(123 * time.Nanosecond)
	arm := func(job string, req relay.ArmRequest) {
		t.Helper()
		req.AgentID, req.JobID, req.InstanceID = "a1", job, "i-"+job
		req.CallbackURL, req.ScheduleID = "https://a1.example/"+job, "sch-"+job
		if req.FireAt.IsZero() {
			req.FireAt = at
		}
		if _, err := e.Arm(ctx, req); err != nil {
			t.Fatalf("arm %s: %v", job, err)
		}
	}
	arm("leased", relay.ArmRequest{FireAt: at.Add(-time.Hour)})
	if ls, err := e.Claim(ctx, 1, time.Minute, relay.Flow{}); err != nil || len(ls) != 1 {
		t.Fatalf("claim: %v, %v", ls, err)
	}
	arm("armed", relay.ArmRequest{FireAt: at.Add(time.Hour), FireAtSpelling: "spelt"})
	arm("direct", relay.ArmRequest{FireAt: at.Add(time.Hour), Flex: time.Minute,
		Direct: relay.DirectKey{Sealed: "v1.sealed", KeyID: "ck_1", MintedAt: at.Truncate(time.Millisecond)}})
	arm("stopped", relay.ArmRequest{FireAt: at.Add(time.Hour)})
	if err := e.SetInstanceState(ctx, "i-stopped", relay.InstanceStopped); err != nil {
		t.Fatal(err)
	}
	for i, job := range []string{"none", "armed", "direct", "leased", "stopped"} {
		id := fmt.Sprintf("d%d", i)
		got, err := e.LookupDelivery(ctx, "lookup-"+id, time.Minute, "a1", job)
		if err != nil {
			t.Fatalf("lookup %s: %v", job, err)
		}
		want, err := separateLookup(ctx, e, "separate-"+id, time.Minute, "a1", job)
		if err != nil {
			t.Fatalf("separate calls for %s: %v", job, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: LookupDelivery = %+v\nseparate calls = %+v", job, got, want)
		}
		if !got.First || got.Found != (job != "none") || got.Stopped != (job == "stopped") {
			t.Errorf("%s: LookupDelivery = %+v", job, got)
		}
		again, err := e.LookupDelivery(ctx, "lookup-"+id, time.Minute, "a1", job)
		if err != nil || again != (relay.DeliveryInfo{}) {
			t.Errorf("%s: a delivery id seen before: %+v, %v; want nothing", job, again, err)
		}
		if first, err := e.FirstDelivery(ctx, "lookup-"+id, time.Minute); err != nil || first {
			t.Errorf("%s: FirstDelivery of an id LookupDelivery recorded: %v, %v", job, first, err)
		}
	}
}

// TestReplayWakesPeers: a replayed fire is re-armed, due now, and its
// NOTIFY wakes another process's engine, whose claim takes it.
func TestReplayWakesPeers(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	peer := newEngine(t, postgres.Options{Schema: e.Schema()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: "j", FireAt: time.Now().Add(-time.Second), ScheduleID: "s1"}); err != nil {
		t.Fatal(err)
	}
	ls, err := e.Claim(ctx, 1, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %v, %v", ls, err)
	}
	if err := e.Kill(ctx, ls[0], "gave up"); err != nil {
		t.Fatal(err)
	}
	w := peer.Wake()
	rp, err := e.Replay(ctx, []string{"s1"})
	if err != nil || len(rp.Replayed) != 1 {
		t.Fatalf("replay: %+v, %v", rp, err)
	}
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer was not woken by the replay")
	}
	ls, err = peer.Claim(ctx, 1, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 1 || ls[0].ScheduleID != "s1" || ls[0].Attempt != 1 {
		t.Fatalf("claim of the replay: %+v, %v", ls, err)
	}
}
