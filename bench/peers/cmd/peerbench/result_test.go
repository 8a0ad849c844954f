package main

import (
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"none", nil, 0},
		{"one", []float64{3}, 3},
		{"odd", []float64{5, 1, 3}, 3},
		{"even", []float64{4, 1, 3, 2}, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := median(tc.in); got != tc.want {
				t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	lags := make([]time.Duration, 100)
	for i := range lags {
		lags[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{0.50, 50 * time.Millisecond},
		{0.99, 99 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{0, time.Millisecond},
	} {
		if got := percentile(lags, tc.p); got != tc.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

func TestNewReport(t *testing.T) {
	t.Parallel()
	round := func(cp99, cRate, ap99, aRate float64, lost int) []*Result {
		return []*Result{
			{System: systemChronos, Fires: 10, Handled: 10, LagP99Ms: cp99, DrainRate: cRate, CPUPerFireUs: 150},
			{System: systemAsynqTuned, Fires: 10, Handled: 10 - lost, Lost: lost, LagP99Ms: ap99, DrainRate: aRate, CPUPerFireUs: 50},
		}
	}
	rep := newReport(10, [][]*Result{
		round(1000, 9000, 800, 12000, 0),
		round(1100, 8000, 900, 11000, 1),
		round(900, 10000, 850, 12500, 0),
	})
	if len(rep.Medians) != 2 || rep.Medians[0].System != systemChronos || rep.Medians[1].System != systemAsynqTuned {
		t.Fatalf("medians = %+v, want chronos then asynq-tuned", rep.Medians)
	}
	if m := rep.Medians[0]; m.LagP99Ms != 1000 || m.DrainRate != 9000 {
		t.Errorf("chronos median p99 %v, rate %v; want 1000, 9000", m.LagP99Ms, m.DrainRate)
	}
	if got := rep.Medians[1].Lost; got != 1 {
		t.Errorf("asynq lost = %d, want the sum 1", got)
	}
	want := Ratio{Peer: systemAsynqTuned, LagP99: 1.176, DrainRate: 0.75, CPUPerFire: 3}
	if len(rep.Ratios) != 1 || rep.Ratios[0] != want {
		t.Errorf("ratios = %+v, want [%+v]", rep.Ratios, want)
	}
	var b strings.Builder
	rep.WriteText(&b)
	for _, s := range []string{"round 3:", "median of 3 rounds", "chronos ÷ asynq-tuned: p99 lag 1.18×, fires/s 0.75×"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, b.String())
		}
	}
}
