package nas

import (
	"math"
	"testing"

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
