package nas

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	bounds := []float64{0.1, 1, 10, math.Inf(1)}
	tests := []struct {
		name       string
		q          float64
		cumulative []uint64
		total      uint64
		want       float64
	}{
		{name: "first bucket from zero", q: 0.5, cumulative: []uint64{10, 10, 10, 10}, total: 10, want: 0.05},
		{name: "middle bucket interpolated", q: 0.5, cumulative: []uint64{0, 4, 8, 8}, total: 8, want: 1},
		{name: "upper part of a bucket", q: 0.75, cumulative: []uint64{0, 4, 8, 8}, total: 8, want: 5.5},
		{name: "rank in the infinite bucket answers the last bound", q: 0.99, cumulative: []uint64{0, 0, 1, 10}, total: 10, want: 10},
		{name: "whole mass on one bound", q: 0.9, cumulative: []uint64{0, 10, 10, 10}, total: 10, want: 0.91},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := histogramQuantile(tt.q, bounds, tt.cumulative, tt.total)
			if math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("quantile %v = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

func TestFireLagSummaryAndDeliveries(t *testing.T) {
	t.Parallel()
	e := memory.New(memory.Options{})
	t.Cleanup(func() { _ = e.Close() })
	m := newMetrics(e)
	if s := m.fireLagSummary(); s.Count != 0 || s.P50Seconds != nil || s.P99Seconds != nil {
		t.Fatalf("empty summary %+v", s)
	}
	for range 99 {
		m.fireLag.Observe(0.02)
	}
	m.fireLag.Observe(30)
	s := m.fireLagSummary()
	if s.Count != 100 || s.P50Seconds == nil || s.P90Seconds == nil || s.P99Seconds == nil {
		t.Fatalf("summary %+v", s)
	}
	if *s.P50Seconds <= 0 || *s.P50Seconds > 0.025 || *s.P90Seconds > 0.025 {
		t.Fatalf("p50 %v p90 %v, want within the 20 ms bucket", *s.P50Seconds, *s.P90Seconds)
	}
	if *s.P99Seconds < *s.P90Seconds {
		t.Fatalf("p99 %v below p90 %v", *s.P99Seconds, *s.P90Seconds)
	}
	m.countDelivery(deliveryDelivered)
	m.countDelivery(deliveryDelivered)
	m.countDelivery(deliveryRejected)
	d := m.deliveriesByOutcome()
	if d[deliveryDelivered] != 2 || d[deliveryRejected] != 1 || d[deliveryRetry] != 0 || len(d) != 6 {
		t.Fatalf("deliveries %v", d)
	}
}

// countingCensus counts the census reads of a memory engine.
type countingCensus struct {
	*memory.Engine
	reads int
}

func (c *countingCensus) ArmedByAgent(ctx context.Context, max int) ([]relay.AgentArmed, bool, error) {
	c.reads++
	return c.Engine.ArmedByAgent(ctx, max)
}

func TestOverviewReusesTheCensusBriefly(t *testing.T) {
	t.Parallel()
	e := &countingCensus{Engine: memory.New(memory.Options{})}
	t.Cleanup(func() { _ = e.Close() })
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	c := &core{engine: e, now: func() time.Time { return now }, metrics: newMetrics(e)}
	s := &Explorer{core: c, census: &censusCache{core: c}}
	ctx := context.Background()
	arm := func(agent string) {
		t.Helper()
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: agent, JobID: "j", FireAt: now.Add(time.Hour), ScheduleID: "s-" + agent, CallbackURL: "http://a.test/"}); err != nil {
			t.Fatal(err)
		}
	}
	agents := func() int {
		t.Helper()
		ov, err := s.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(ov.Agents)
	}
	arm("a")
	if n := agents(); n != 1 || e.reads != 1 {
		t.Fatalf("%d agents after %d reads", n, e.reads)
	}
	arm("b")
	if n := agents(); n != 1 || e.reads != 1 {
		t.Fatalf("within the reuse time: %d agents after %d reads, want the cached 1 and 1 read", n, e.reads)
	}
	now = now.Add(minCensusTTL)
	if n := agents(); n != 2 || e.reads != 2 {
		t.Fatalf("after the reuse time: %d agents after %d reads", n, e.reads)
	}
	arm("c")
	s.census.invalidate()
	if n := agents(); n != 3 || e.reads != 3 {
		t.Fatalf("after an invalidation: %d agents after %d reads", n, e.reads)
	}
}
