package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
)

// TestGroupCommitsAcrossShardsAfterScriptFlush acks, with records, the
// leases of fires spread over every shard in one batch, a pipeline of one
// script call per shard, on a Redis that forgot its scripts (a restart,
// SCRIPT FLUSH): every ack succeeds exactly once, every row is gone and
// every record is written; then acks of the same leases are lost leases,
// and a batch of records after another flush is written.
func TestGroupCommitsAcrossShardsAfterScriptFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	c := redistest.ClientOf(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := Open(ctx, srv.URL(), Options{Prefix: redistest.Prefix(t), Shards: 4})
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
		ls, err := e.Claim(ctx, n, time.Minute, relay.Flow{})
		if err != nil || len(ls) == 0 {
			t.Fatalf("claim: %d, %v with %d of %d claimed", len(ls), err, len(leases), n)
		}
		leases = append(leases, ls...)
	}
	record := func(l relay.Lease) relay.LastFire {
		return relay.LastFire{AgentID: l.AgentID, JobID: l.JobID, ScheduleID: l.ScheduleID, InstanceID: l.InstanceID,
			CallbackURL: l.CallbackURL, FireAt: l.FireAt, Outcome: relay.LastFireDelivered, Reason: "agent answered 202", At: time.Now()}
	}
	// ackAll acks every lease in one batch, with records when rec, and
	// returns each lease's answer.
	ackAll := func(rec bool) []error {
		batch := make([]*groupReq[ackItem], len(leases))
		for i, l := range leases {
			a := ackItem{l: l}
			if rec {
				f := record(l)
				a.rec = &f
			}
			batch[i] = &groupReq[ackItem]{v: a, done: make(chan error, 1)}
		}
		e.ackMany(ctx, batch)
		errs := make([]error, len(batch))
		for i, r := range batch {
			errs[i] = <-r.done
		}
		return errs
	}
	if shards, _ := byShard(leasesBatch(leases), func(l relay.Lease) int { return e.k.shardOf(l.AgentID) }); len(shards) != 4 {
		t.Fatalf("the leases span %d shards, want 4", len(shards))
	}

	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("script flush: %v", err)
	}
	for i, err := range ackAll(true) {
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
	for i, err := range ackAll(false) {
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
	records := make([]*groupReq[relay.LastFire], len(leases))
	for i, l := range leases {
		records[i] = &groupReq[relay.LastFire]{v: record(l), done: make(chan error, 1)}
	}
	e.recordLastFires(ctx, records)
	for i, r := range records {
		err := <-r.done
		if err != nil {
			t.Fatalf("record %s: %v", leases[i].ScheduleID, err)
		}
	}
	checkRecords(ctx, t, e, leases)
}

// checkRecords wants a delivered last fire record of every lease.
func checkRecords(ctx context.Context, t *testing.T, e *Engine, leases []relay.Lease) {
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

// leasesBatch wraps leases as the requests of a batch.
func leasesBatch(leases []relay.Lease) []*groupReq[relay.Lease] {
	out := make([]*groupReq[relay.Lease], len(leases))
	for i, l := range leases {
		out[i] = &groupReq[relay.Lease]{v: l}
	}
	return out
}
