package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// TestGroupCommitsAcrossShardsAfterScriptFlush acks, with records, the
// leases of fires spread over every shard, all at once so that they batch
// into pipelines of one script call per shard, on a Redis that forgot its
// scripts (a restart, SCRIPT FLUSH): every ack succeeds exactly once, every
// row is gone and every record is written; then acks of the same leases are
// lost leases, and records made at once after another flush are written.
func TestGroupCommitsAcrossShardsAfterScriptFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	c := redistest.ClientOf(t, srv.URL())
	ctx := ctxFor(t, 30*time.Second)
	e, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: redistest.Prefix(t), Shards: 4})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	const n = 64
	past := time.Now().Add(-time.Second)
	for i := range n {
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: fmt.Sprintf("agent-%d", i%16), InstanceID: "inst",
			JobID: fmt.Sprintf("job-%d", i), FireAt: past, CallbackURL: "http://agent.test", ScheduleID: fmt.Sprintf("sch-%d", i)}); err != nil {
			t.Fatalf("arm: %v", err)
		}
	}
	var leases []relay.Lease
	for len(leases) < n {
		ls, err := e.Claim(ctx, n, time.Minute)
		if err != nil || len(ls) == 0 {
			t.Fatalf("claim: %d, %v with %d of %d claimed", len(ls), err, len(leases), n)
		}
		leases = append(leases, ls...)
	}
	record := func(l relay.Lease) relay.LastFire {
		return relay.LastFire{AgentID: l.AgentID, JobID: l.JobID, ScheduleID: l.ScheduleID, InstanceID: l.InstanceID,
			CallbackURL: l.CallbackURL, FireAt: l.FireAt, Outcome: relay.LastFireDelivered, Reason: "agent answered 202", At: time.Now()}
	}
	ackAll := func(f func(relay.Lease) error) []error {
		errs := make([]error, len(leases))
		var wg sync.WaitGroup
		for i, l := range leases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = f(l)
			}()
		}
		wg.Wait()
		return errs
	}

	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("script flush: %v", err)
	}
	for i, err := range ackAll(func(l relay.Lease) error { return e.AckRecord(ctx, l, record(l)) }) {
		if err != nil {
			t.Fatalf("ack %s: %v", leases[i].ScheduleID, err)
		}
	}
	for _, l := range leases {
		if _, err := e.Get(ctx, l.AgentID, l.JobID); !errors.Is(err, relay.ErrNotFound) {
			t.Fatalf("get %s after its ack: %v, want not found", l.ScheduleID, err)
		}
	}
	checkRecords(ctx, t, e, leases)
	for i, err := range ackAll(func(l relay.Lease) error { return e.Ack(ctx, l) }) {
		if !errors.Is(err, relay.ErrLeaseLost) {
			t.Fatalf("second ack %s: %v, want a lost lease", leases[i].ScheduleID, err)
		}
	}

	for _, l := range leases {
		if err := e.ForgetLastFire(ctx, l.AgentID, l.JobID); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("script flush: %v", err)
	}
	for i, err := range ackAll(func(l relay.Lease) error { return e.RecordLastFire(ctx, record(l)) }) {
		if err != nil {
			t.Fatalf("record %s: %v", leases[i].ScheduleID, err)
		}
	}
	checkRecords(ctx, t, e, leases)
}

// checkRecords wants a delivered last fire record of every lease.
func checkRecords(ctx context.Context, t *testing.T, e *redis.Engine, leases []relay.Lease) {
	t.Helper()
	got := map[string]relay.LastFire{}
	agents := map[string]bool{}
	for _, l := range leases {
		if agents[l.AgentID] {
			continue
		}
		agents[l.AgentID] = true
		fs, err := e.LastFiresOf(ctx, l.AgentID, time.Time{})
		if err != nil {
			t.Fatalf("last fires of %s: %v", l.AgentID, err)
		}
		for _, f := range fs {
			got[f.ScheduleID] = f
		}
	}
	if len(got) != len(leases) {
		t.Fatalf("%d records, want %d", len(got), len(leases))
	}
	for _, l := range leases {
		f, ok := got[l.ScheduleID]
		if !ok || f.JobID != l.JobID || f.Outcome != relay.LastFireDelivered || !f.FireAt.Equal(l.FireAt) {
			t.Fatalf("record of %s: %+v (found %v)", l.ScheduleID, f, ok)
		}
	}
}
