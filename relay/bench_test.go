package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// BenchmarkMemoryDrain drains a burst of 10,000 fires due at the same instant
// (spread over 200 agents) through one dispatcher with the default settings
// to a Deliverer that does nothing, and reports fires per second: the relay's
// own overhead (claim, bookkeeping, ack) on the embedded engine.
func BenchmarkMemoryDrain(b *testing.B) {
	const fires, agents = 10_000, 200
	ctx := context.Background()
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		e := memory.New(memory.Options{})
		at := time.Now()
		for i := range fires {
			if _, err := e.Arm(ctx, relay.ArmRequest{
				AgentID: fmt.Sprintf("agent%03d", i%agents), JobID: fmt.Sprintf("job%05d", i),
				FireAt: at, ScheduleID: fmt.Sprintf("sch%05d", i),
			}); err != nil {
				b.Fatalf("arm: %v", err)
			}
		}
		var n atomic.Int64
		all := make(chan struct{})
		d := relay.NewDispatcher(e, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
			if n.Add(1) == fires {
				close(all)
			}
			return relay.Outcome{Kind: relay.Done}
		}), relay.DispatcherConfig{Logger: quiet})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { done <- d.Run(runCtx) }()
		<-all
		cancel()
		if err := <-done; err != nil { // Run returns once every delivery is settled
			b.Fatalf("run: %v", err)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		if s, err := e.Stats(ctx); err != nil || s != (relay.Stats{}) {
			b.Fatalf("stats after the drain = %+v, %v", s, err)
		}
		_ = e.Close()
	}
	b.ReportMetric(float64(fires*b.N)/elapsed.Seconds(), "fires/s")
}
