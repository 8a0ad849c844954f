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

// TestRowsOfEarlierVersionsRead writes rows and dead letters as versions
// before flexible windows wrote them (ten or eleven row fields, no flow
// keys): they read, claim, ack and replay as before, with no window, and a
// lease taken before the upgrade (no in-flight entry) still acks.
func TestRowsOfEarlierVersionsRead(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	e := openOneShard(ctx, t, func() time.Time { return clock })
	fms := clock.Add(-time.Minute).UnixMilli()
	// As the old scriptArm wrote them: {sid, instance, fire ms, ns, callback,
	// attempt, token, due - fire, fire - created, last error, [spelling]}.
	write := `
local fms = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'plain', cmsgpack.pack({'s-plain', 'i', fms, 0, 'https://a', 0, 0, 0, 60000, ''}))
redis.call('HSET', KEYS[1], 'spelt', cmsgpack.pack({'s-spelt', 'i', fms, 0, 'https://a', 0, 0, 0, 60000, '', '2026-06-01T10:59:00+02:00'}))
redis.call('HSET', KEYS[1], 'leased', cmsgpack.pack({'s-leased', 'i', fms, 0, 'https://a', 1, 7, 0, 60000, ''}))
redis.call('ZADD', KEYS[2], fms, '1:aplain', fms, '1:aspelt')
redis.call('ZADD', KEYS[3], fms + 3600000, '1:aleased')
redis.call('SET', KEYS[4], 7)
local d = {'a', 'dead', 's-dead', 'i', fms, 0, 'https://a', 3, 0, 0, 60000, 'gave up', 'gave up', fms, '2026-06-01T10:59:00+02:00'}
redis.call('HSET', KEYS[5], 's-dead', cmsgpack.pack(d))
redis.call('ZADD', KEYS[6], fms, 's-dead')
redis.call('ZADD', KEYS[7], fms, 's-dead')
return 1`
	if err := e.c.Eval(ctx, write, []string{e.k.rows(0, "a"), e.k.due(0), e.k.lease(0), e.k.token(0),
		e.k.dead(0), e.k.deadByTime(0), e.k.deadOfAgent(0, "a")}, fms).Err(); err != nil {
		t.Fatalf("write old rows: %v", err)
	}
	for _, job := range []string{"plain", "spelt"} {
		o, err := e.Get(ctx, "a", job)
		if err != nil || o.Flex != 0 || o.State != relay.StateArmed || !o.FireAt.Equal(ms(fms)) {
			t.Fatalf("get %s: %+v, %v", job, o, err)
		}
	}
	items, _, err := e.List(ctx, "a", "", 10)
	if err != nil || len(items) != 3 || items[0].State != relay.StateLeased {
		t.Fatalf("list: %+v, %v", items, err)
	}
	ls, err := e.Claim(ctx, 10, time.Minute, relay.Flow{Parallelism: 4})
	if err != nil || len(ls) != 2 {
		t.Fatalf("claim: %d, %v", len(ls), err)
	}
	for _, l := range ls {
		stored, err := e.c.HGet(ctx, e.k.rows(0, "a"), l.JobID).Result()
		if err != nil || string(packLeasedRow(nil, l)) != stored {
			t.Fatalf("%s: the leased row packs otherwise in Go (%v)", l.JobID, err)
		}
		if err := e.Ack(ctx, l); err != nil {
			t.Fatalf("ack %s: %v", l.JobID, err)
		}
	}
	// The lease taken before the upgrade has no in-flight entry: its ack
	// holds all the same.
	old := items[0]
	if err := e.Ack(ctx, relay.Lease{OneShot: old, Token: 7}); err != nil {
		t.Fatalf("ack of the old lease: %v", err)
	}
	dead, _, err := e.ListDead(ctx, "a", "", 10)
	if err != nil || len(dead) != 1 || dead[0].Flex != 0 || dead[0].FireAtSpelling == "" {
		t.Fatalf("list dead: %+v, %v", dead, err)
	}
	if rp, err := e.Replay(ctx, []string{"s-dead"}); err != nil || len(rp.Replayed) != 1 {
		t.Fatalf("replay: %+v, %v", rp, err)
	}
	o, err := e.Get(ctx, "a", "dead")
	if err != nil || o.FireAtSpelling != "2026-06-01T10:59:00+02:00" || o.Flex != 0 {
		t.Fatalf("replayed: %+v, %v", o, err)
	}
}

// TestFlexibleFireDeadLetterReplays kills a fire with a flexible window and
// a canonical fire_at, and replays it: the window survives both.
func TestFlexibleFireDeadLetterReplays(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := openOneShard(ctx, t, nil)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: "j", FireAt: at, Flex: time.Hour, ScheduleID: "s"}); err != nil {
		t.Fatal(err)
	}
	ls, err := e.Claim(ctx, 1, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %d, %v", len(ls), err)
	}
	if err := e.Kill(ctx, ls[0], "gave up"); err != nil {
		t.Fatal(err)
	}
	dead, _, err := e.ListDead(ctx, "a", "", 10)
	if err != nil || len(dead) != 1 || dead[0].Flex != time.Hour || dead[0].FireAtSpelling != "" {
		t.Fatalf("list dead: %+v, %v", dead, err)
	}
	if rp, err := e.ReplayAgent(ctx, "a"); err != nil || len(rp.Replayed) != 1 {
		t.Fatalf("replay: %+v, %v", rp, err)
	}
	o, err := e.Get(ctx, "a", "j")
	if err != nil || o.Flex != time.Hour || o.FireAtSpelling != "" || !o.FireAt.Equal(at) {
		t.Fatalf("replayed: %+v, %v", o, err)
	}
}
