package metrics_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	relaymetrics "github.com/chronoscron/chronos/relay/metrics"
)

// failingStats is an engine whose store does not answer.
type failingStats struct{ relay.Engine }

func (failingStats) Stats(context.Context) (relay.Stats, error) {
	return relay.Stats{}, errors.New("down")
}

// gather returns each gathered sample as "name{label=value,...}" → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestStoreAndDispatch registers both collectors on the embedded engine:
// every metric is there from the start with its labels, and the dispatch
// counters count what the dispatcher reports.
func TestStoreAndDispatch(t *testing.T) {
	t.Parallel()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	reg := prometheus.NewRegistry()
	d := relaymetrics.NewDispatch()
	reg.MustRegister(relaymetrics.NewStore(eng), d)
	d.CountOutcome(relay.Retry)
	d.CountRetry(relay.ColdStartLadder)
	d.CountRetry(relay.NormalLadder)
	d.CountRetry(relay.NormalLadder)
	d.CountDeadLetter()
	d.ObserveFireLag(0)
	got := gather(t, reg)
	want := map[string]float64{
		"chronos_relay_armed": 0, "chronos_relay_due_backlog": 0, "chronos_relay_leased": 0,
		"chronos_relay_dead_letter": 0, "chronos_relay_store_up": 1, "chronos_relay_store_lost": 0,
		"chronos_relay_held_fires": 0, "chronos_relay_probing_agents": 0,
		"chronos_relay_dispatch_lag_seconds":       1,
		"chronos_relay_outcomes_total{kind=done}":  0,
		"chronos_relay_outcomes_total{kind=retry}": 1,
		"chronos_relay_outcomes_total{kind=dead}":  0,
		"chronos_relay_retries_total{cold=true}":   1,
		"chronos_relay_retries_total{cold=false}":  2,
		"chronos_relay_dead_lettered_total":        1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if len(got) != len(want) {
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Errorf("gathered %v, want exactly %d samples", keys, len(want))
	}
}

// TestStoreDown reports a store that does not answer as down and leaves
// the other gauges out rather than reporting zeros.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(relaymetrics.NewStore(failingStats{eng}))
	got := gather(t, reg)
	if len(got) != 1 || got["chronos_relay_store_up"] != 0 {
		t.Fatalf("gathered %v, want only chronos_relay_store_up 0", got)
	}
}
