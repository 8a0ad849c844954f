package redis_test

import (
	"errors"
	"strconv"
	"strings"
	"sync"
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
	ls, err := e.Claim(ctx, 10, time.Minute, relay.Flow{})
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
	ls, err := e.Claim(ctx, 100, time.Minute, relay.Flow{})
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

// TestClaimOfThousandsInOneCall claims more fires in one call than a Lua
// call can take as arguments at once (the scripts split their batched
// commands): every fire is leased once, in due order, with its own
// increasing fencing token and attempt 1, and all of them ack.
func TestClaimOfThousandsInOneCall(t *testing.T) {
	t.Parallel()
	e := newEngine(t, redis.Options{Shards: 1})
	ctx := ctxFor(t, 30*time.Second)
	const n = 4500
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				_, err := e.Arm(ctx, relay.ArmRequest{AgentID: "agent-" + strconv.Itoa(i%50), JobID: "job-" + strconv.Itoa(i),
					FireAt: base.Add(time.Duration(i) * time.Millisecond), ScheduleID: "s-" + strconv.Itoa(i)})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("arm: %v", err)
		}
	}
	ls, err := e.Claim(ctx, n, time.Minute, relay.Flow{})
	if err != nil || len(ls) != n {
		t.Fatalf("claim: %d leases, %v; want %d", len(ls), err, n)
	}
	for i, l := range ls {
		if want := "s-" + strconv.Itoa(i); l.ScheduleID != want || l.Attempt != 1 || l.State != relay.StateLeased {
			t.Fatalf("lease %d: %s attempt %d %s; want %s attempt 1 leased", i, l.ScheduleID, l.Attempt, l.State, want)
		}
		if i > 0 && l.Token <= ls[i-1].Token {
			t.Fatalf("lease %d: token %d after %d", i, l.Token, ls[i-1].Token)
		}
	}
	if st, err := e.Stats(ctx); err != nil || st.Leased != n || st.Due != 0 {
		t.Fatalf("stats %+v, %v; want %d leased, none due", st, err, n)
	}
	ackErrs := make([]error, n)
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ackErrs[i] = e.Ack(ctx, l)
		}()
	}
	wg.Wait()
	for i, err := range ackErrs {
		if err != nil {
			t.Fatalf("ack %s: %v", ls[i].ScheduleID, err)
		}
	}
	if st, err := e.Stats(ctx); err != nil || st.Leased != 0 || st.Armed != 0 {
		t.Fatalf("stats after the acks %+v, %v", st, err)
	}
}

// TestClaimInterleavesAgentsDueTogether arms, agent after agent, three
// fires of each of three agents due in the same millisecond: claims take
// them round the agents, each agent's in the order it armed them, where
// sorting by member would hand the first claim one agent's three.
func TestClaimInterleavesAgentsDueTogether(t *testing.T) {
	t.Parallel()
	e := newEngine(t, redis.Options{Shards: 1})
	ctx := ctxFor(t, 10*time.Second)
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	for _, agent := range []string{"a1", "a2", "a3"} {
		for _, job := range []string{"j2", "j0", "j1"} {
			if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: agent, JobID: job, FireAt: at, ScheduleID: agent + job}); err != nil {
				t.Fatalf("arm: %v", err)
			}
		}
	}
	var got []string
	for len(got) < 9 {
		ls, err := e.Claim(ctx, 3, time.Minute, relay.Flow{})
		if err != nil || len(ls) != 3 {
			t.Fatalf("claim: %d leases, %v; want 3", len(ls), err)
		}
		for _, l := range ls {
			got = append(got, l.AgentID+"/"+l.JobID)
		}
	}
	want := []string{"a1/j2", "a2/j2", "a3/j2", "a1/j0", "a2/j0", "a3/j0", "a1/j1", "a2/j1", "a3/j1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("claim order %v, want %v", got, want)
	}
	// Due exactly at its millisecond, as ever: nothing is claimable before.
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: "later", FireAt: at.Add(time.Hour), ScheduleID: "later"}); err != nil {
		t.Fatalf("arm: %v", err)
	}
	next, ok, err := e.NextDue(ctx)
	if err != nil || !ok || next < 59*time.Minute || next > time.Hour {
		t.Fatalf("next due in %s (%v, %v), want within the hour after now", next, ok, err)
	}
}
