package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// benchEngine opens an engine on the shared test Redis for a benchmark.
func benchEngine(b *testing.B) *redis.Engine {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := redis.Open(ctx, redistest.URL(b), redis.Options{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	b.Cleanup(func() { _ = e.Close() })
	return e
}

// BenchmarkArm measures one arm (row + due entry in one script), from
// parallel callers spread over 100 agents.
func BenchmarkArm(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	var seq int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := atomicAdd(&seq)
			_, err := e.Arm(ctx, relay.ArmRequest{
				AgentID: fmt.Sprintf("agent-%d", i%100), InstanceID: "inst", JobID: fmt.Sprintf("job-%d", i),
				FireAt: at, CallbackURL: "https://agent.example", ScheduleID: fmt.Sprintf("sch_%032x", i),
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkClaimAck measures claiming due one-shots in batches of 64 and
// acking each; the arms happen outside the timer.
func BenchmarkClaimAck(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	past := time.Now().Add(-time.Second)
	for i := range b.N {
		_, err := e.Arm(ctx, relay.ArmRequest{
			AgentID: fmt.Sprintf("agent-%d", i%100), InstanceID: "inst", JobID: fmt.Sprintf("job-%d", i),
			FireAt: past, CallbackURL: "https://agent.example", ScheduleID: fmt.Sprintf("sch_%032x", i),
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < b.N {
		ls, err := e.Claim(ctx, 64, time.Minute, relay.Flow{})
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) == 0 {
			b.Fatalf("claimed nothing with %d of %d left", b.N-done, b.N)
		}
		for _, l := range ls {
			if err := e.Ack(ctx, l); err != nil {
				b.Fatal(err)
			}
		}
		done += len(ls)
	}
}

// atomicAdd returns the next value of a shared counter.
func atomicAdd(p *int64) int64 { return atomic.AddInt64(p, 1) }

// BenchmarkClaimAckConcurrent is BenchmarkClaimAck with the acks of each
// batch made concurrently, as dispatchers make them (they group-commit).
func BenchmarkClaimAckConcurrent(b *testing.B) { benchClaimAckConcurrent(b, relay.Flow{}) }

// BenchmarkClaimAckConcurrentFlow is BenchmarkClaimAckConcurrent under the
// dispatchers' default flow control (4 in flight per agent): each claim
// also reads and writes every agent's flow state, and holds back what goes
// over.
func BenchmarkClaimAckConcurrentFlow(b *testing.B) {
	benchClaimAckConcurrent(b, relay.Flow{Parallelism: 4})
}

// benchClaimAckConcurrent claims batches of 64 under flow and acks each
// batch concurrently.
func benchClaimAckConcurrent(b *testing.B, flow relay.Flow) {
	e := benchEngine(b)
	ctx := context.Background()
	past := time.Now().Add(-time.Second)
	for i := range b.N {
		_, err := e.Arm(ctx, relay.ArmRequest{
			AgentID: fmt.Sprintf("agent-%d", i%100), InstanceID: "inst", JobID: fmt.Sprintf("job-%d", i),
			FireAt: past, CallbackURL: "https://agent.example", ScheduleID: fmt.Sprintf("sch_%032x", i),
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	errs := make(chan error, 64)
	for done < b.N {
		ls, err := e.Claim(ctx, 64, time.Minute, flow)
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) == 0 {
			b.Fatalf("claimed nothing with %d of %d left", b.N-done, b.N)
		}
		for _, l := range ls {
			go func() { errs <- e.Ack(ctx, l) }()
		}
		for range ls {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		done += len(ls)
	}
}

// BenchmarkRecordLastFire measures recording a fire's final outcome, the
// write NAS's relay route adds to every delivered fire, from parallel
// callers spread over 100 agents.
func BenchmarkRecordLastFire(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	at := time.Now()
	var seq int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := atomicAdd(&seq)
			err := e.RecordLastFire(ctx, relay.LastFire{
				AgentID: fmt.Sprintf("agent-%d", i%100), InstanceID: "inst", JobID: fmt.Sprintf("job-%d", i),
				ScheduleID: fmt.Sprintf("sch_%032x", i), FireAt: at, CallbackURL: "https://agent.example",
				Outcome: relay.LastFireDelivered, Reason: "agent answered 202 accepted", At: at,
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
