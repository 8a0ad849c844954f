package redis

import (
	"context"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
)

// TestFailedFeedListMovesToZset: earlier versions kept an agent's failed-fire
// feed as a list of schedule ids; the first ListFailed moves the ids still in
// the dead letter into the feed, with their failure times, and drops the list.
func TestFailedFeedListMovesToZset(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	e := openOneShard(ctx, t, func() time.Time { return clock })
	var ids []string
	for _, job := range []string{"j1", "j2"} {
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: job, FireAt: clock, ScheduleID: "sch-" + job}); err != nil {
			t.Fatal(err)
		}
		ls, err := e.Claim(ctx, 1, time.Minute, relay.Flow{})
		if err != nil || len(ls) != 1 {
			t.Fatalf("claim: %v, %d", err, len(ls))
		}
		if err := e.Kill(ctx, ls[0], "gave up"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ls[0].ScheduleID)
		clock = clock.Add(time.Minute)
	}
	// Rewrite the feed as the list an earlier version wrote, with an id
	// whose dead letter was replayed since.
	feed, list := e.k.failed(0, "a"), e.k.failedList(0, "a")
	if err := e.c.Del(ctx, feed).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.RPush(ctx, list, ids[1], "sch-replayed", ids[0]).Err(); err != nil {
		t.Fatal(err)
	}

	got, err := e.ListFailed(ctx, "a", time.Hour, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ScheduleID != ids[0] || got[1].ScheduleID != ids[1] {
		t.Fatalf("failed fires %+v, want %v oldest first", got, ids)
	}
	if n, err := e.c.Exists(ctx, list).Result(); err != nil || n != 0 {
		t.Fatalf("the old list is still there: %d, %v", n, err)
	}
	if n, err := e.c.ZCard(ctx, feed).Result(); err != nil || n != 2 {
		t.Fatalf("feed holds %d, %v; want 2", n, err)
	}
	// Not consumed, and acknowledged as any other.
	if n, err := e.AckFailed(ctx, "a", time.Hour, ids); err != nil || n != 2 {
		t.Fatalf("ack = %d, %v; want 2", n, err)
	}
	if got, err := e.ListFailed(ctx, "a", time.Hour, 10); err != nil || len(got) != 0 {
		t.Fatalf("after the ack: %+v, %v", got, err)
	}
}

// TestStoppedInstancesCopiedToShardsOnOpen: data written before claims read
// the shards' copies of the stopped set has its stopped instances in the
// control set only; an engine that opens it copies them to every shard, so
// a claim reports a fire of such an instance as stopped.
func TestStoppedInstancesCopiedToShardsOnOpen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	old, err := Open(ctx, redistest.URL(t), Options{Prefix: prefix, Shards: 3})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer old.Close()
	// As an earlier version stopped it: the control set alone.
	if err := old.c.SAdd(ctx, old.k.stopped(), "inst-old").Err(); err != nil {
		t.Fatal(err)
	}
	for _, agent := range []string{"a1", "a2", "a3", "a4", "a5", "a6"} {
		if _, err := old.Arm(ctx, relay.ArmRequest{AgentID: agent, InstanceID: "inst-old", JobID: "j",
			FireAt: time.Now().Add(-time.Second), ScheduleID: "sch-" + agent}); err != nil {
			t.Fatal(err)
		}
	}
	e, err := Open(ctx, redistest.URL(t), Options{Prefix: prefix, Shards: 3})
	if err != nil {
		t.Fatalf("open again: %v", err)
	}
	defer e.Close()
	for s := range 3 {
		if ok, err := e.c.SIsMember(ctx, e.k.shardStopped(s), "inst-old").Result(); err != nil || !ok {
			t.Fatalf("shard %d's copy lacks the stopped instance: %v %v", s, ok, err)
		}
	}
	ls, err := e.Claim(ctx, 10, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 6 {
		t.Fatalf("claim: %d leases, %v", len(ls), err)
	}
	for _, l := range ls {
		if !l.InstanceStopped {
			t.Errorf("the fire of %s is not reported stopped", l.AgentID)
		}
	}
	// Started again through the engine: every copy forgets it.
	if err := e.SetInstanceState(ctx, "inst-old", relay.InstanceRunning); err != nil {
		t.Fatal(err)
	}
	for s := range 3 {
		if ok, _ := e.c.SIsMember(ctx, e.k.shardStopped(s), "inst-old").Result(); ok {
			t.Fatalf("shard %d's copy still holds the started instance", s)
		}
	}
}
