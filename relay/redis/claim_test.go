package redis_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// TestClaimReturnsTakenLeasesWithItsError claims a shard holding a good fire
// and one whose row the engine cannot read back: the claim script leases
// both, and the caller must get the good lease along with the error, not an
// error alone (that fire would sit leased, undelivered, for a whole lease).
func TestClaimReturnsTakenLeasesWithItsError(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	e := newEngine(t, redis.Options{Prefix: prefix, Shards: 1})
	ctx := ctxFor(t, 10*time.Second)
	past := time.Now().Add(-time.Second)
	for _, job := range []string{"bad", "good"} {
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: job, FireAt: past, ScheduleID: "s-" + job}); err != nil {
			t.Fatalf("arm %s: %v", job, err)
		}
	}
	// The bad row's schedule id is a number: Lua leases it, Go cannot read it.
	c := redistest.Client(t)
	rows := "{chronos:" + prefix + ":0}:a:a1"
	if err := c.Eval(ctx, `local r = cmsgpack.unpack(redis.call('HGET', KEYS[1], 'bad'))
r[1] = 12345
redis.call('HSET', KEYS[1], 'bad', cmsgpack.pack(r))
return 1`, []string{rows}).Err(); err != nil {
		t.Fatalf("corrupt the row: %v", err)
	}
	ls, err := e.Claim(ctx, 10, time.Minute)
	if err == nil {
		t.Fatal("claim of an unreadable row succeeded")
	}
	if len(ls) != 1 || ls[0].JobID != "good" || ls[0].Attempt != 1 {
		t.Fatalf("claim returned %+v with %v; want the good lease with the error", ls, err)
	}
	if errors.Is(err, relay.ErrLeaseLost) {
		t.Fatalf("error %v", err)
	}
	// The lease is real: it acks.
	if err := e.Ack(ctx, ls[0]); err != nil {
		t.Fatalf("ack of the returned lease: %v", err)
	}
}

// TestClaimAcrossShardsLeavesNoLeaseUnreturned claims over several shards
// when one shard holds an unreadable row: whichever shard the claim reaches
// it at, every lease the engine took except that row's is handed to the
// caller (no fire sits leased with nobody to deliver it), and each acks.
func TestClaimAcrossShardsLeavesNoLeaseUnreturned(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	e := newEngine(t, redis.Options{Prefix: prefix, Shards: 4})
	ctx := ctxFor(t, 10*time.Second)
	past := time.Now().Add(-time.Second)
	arm := func(agent, job string) {
		t.Helper()
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: agent, JobID: job, FireAt: past, ScheduleID: "s-" + agent + "-" + job}); err != nil {
			t.Fatalf("arm %s/%s: %v", agent, job, err)
		}
	}
	for i := range 12 {
		arm("agent-"+strconv.Itoa(i), "j")
	}
	arm("broken", "bad")
	arm("broken", "good")
	c := redistest.Client(t)
	var rows string
	for _, k := range keysOf(ctx, t, c, prefix) {
		if strings.HasSuffix(k, ":a:broken") {
			rows = k
		}
	}
	if rows == "" {
		t.Fatal("no rows key of the broken agent")
	}
	if err := c.Eval(ctx, `local r = cmsgpack.unpack(redis.call('HGET', KEYS[1], 'bad'))
r[1] = 12345
redis.call('HSET', KEYS[1], 'bad', cmsgpack.pack(r))
return 1`, []string{rows}).Err(); err != nil {
		t.Fatalf("corrupt the row: %v", err)
	}
	ls, err := e.Claim(ctx, 100, time.Minute)
	if err == nil {
		t.Fatal("claim of an unreadable row succeeded")
	}
	st, serr := e.Stats(ctx)
	if serr != nil {
		t.Fatal(serr)
	}
	if st.Leased != int64(len(ls))+1 {
		t.Fatalf("%d leased in the store, %d returned with %v: leases were taken and not handed over", st.Leased, len(ls), err)
	}
	var good bool
	for _, l := range ls {
		good = good || l.AgentID == "broken"
		if err := e.Ack(ctx, l); err != nil {
			t.Fatalf("ack of %s/%s: %v", l.AgentID, l.JobID, err)
		}
	}
	if !good {
		t.Errorf("the broken agent's readable fire was not returned: %+v", ls)
	}
}
