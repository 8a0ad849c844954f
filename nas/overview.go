package nas

// The operator's overview: what the dashboard shows besides the dead letter
// and the unarmed jobs, which have routes of their own.

import (
	"context"
	"fmt"
	"math"
	"sort"

	dto "github.com/prometheus/client_model/go"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// overviewMax bounds the agents and the stopped instances of an overview.
const overviewMax = 1000

// Overview gathers the operator's overview: the store's gauges, the agents
// holding fires (when the engine implements relay.Census), this process's
// fire lag percentiles and deliveries by outcome, and stopped instances.
func (s *Service) Overview(ctx context.Context) (contract.OperatorOverview, error) {
	st, err := s.engine.Stats(ctx)
	if err != nil {
		return contract.OperatorOverview{}, fmt.Errorf("overview: %w", err)
	}
	ov := contract.OperatorOverview{
		GeneratedAt:      contract.NewTime(s.now().UTC()),
		Store:            contract.StoreGauges{Armed: st.Armed, DueBacklog: st.Due, Leased: st.Leased, DeadLetter: st.DeadLetter},
		Agents:           []contract.AgentArmedCount{},
		StoppedInstances: []contract.StoppedInstance{},
		FireLag:          s.metrics.fireLagSummary(),
		Deliveries:       s.metrics.deliveriesByOutcome(),
	}
	c, ok := s.engine.(relay.Census)
	if !ok {
		return ov, nil
	}
	agents, more, err := c.ArmedByAgent(ctx, overviewMax)
	if err != nil {
		return contract.OperatorOverview{}, fmt.Errorf("overview: %w", err)
	}
	ov.AgentsTruncated = more
	for _, a := range agents {
		ov.Agents = append(ov.Agents, contract.AgentArmedCount{AgentID: a.AgentID, Armed: a.Armed})
	}
	ids, more, err := c.StoppedInstances(ctx, overviewMax)
	if err != nil {
		return contract.OperatorOverview{}, fmt.Errorf("overview: %w", err)
	}
	ov.StoppedTruncated = more
	for _, id := range ids {
		inst := contract.StoppedInstance{InstanceID: id}
		info, err := s.engine.Instance(ctx, id)
		if err != nil {
			return contract.OperatorOverview{}, fmt.Errorf("overview: %w", err)
		}
		if !info.StoppedAt.IsZero() {
			at := contract.NewTime(info.StoppedAt.UTC())
			inst.StoppedAt = &at
		}
		ov.StoppedInstances = append(ov.StoppedInstances, inst)
	}
	return ov, nil
}

// fireLagSummary reads the fire lag histogram as percentiles.
func (m *Metrics) fireLagSummary() contract.FireLagSummary {
	var d dto.Metric
	if err := m.fireLag.Write(&d); err != nil || d.Histogram == nil {
		return contract.FireLagSummary{}
	}
	h := d.Histogram
	sum := contract.FireLagSummary{Count: h.GetSampleCount()}
	if sum.Count == 0 {
		return sum
	}
	var bounds []float64
	var counts []uint64
	for _, b := range h.Bucket {
		bounds = append(bounds, b.GetUpperBound())
		counts = append(counts, b.GetCumulativeCount())
	}
	p := func(q float64) *float64 {
		v := histogramQuantile(q, bounds, counts, sum.Count)
		return &v
	}
	sum.P50Seconds, sum.P90Seconds, sum.P99Seconds = p(0.5), p(0.9), p(0.99)
	return sum
}

// histogramQuantile estimates quantile q of a histogram from its cumulative
// bucket counts, interpolating linearly inside the bucket the rank falls in
// (the first bucket from 0). A rank past the last finite bound answers that
// bound: the histogram knows no more.
func histogramQuantile(q float64, bounds []float64, cumulative []uint64, total uint64) float64 {
	rank := q * float64(total)
	i := sort.Search(len(cumulative), func(i int) bool { return float64(cumulative[i]) >= rank })
	if i == len(bounds) {
		if len(bounds) == 0 {
			return 0
		}
		return bounds[len(bounds)-1]
	}
	if math.IsInf(bounds[i], 1) {
		if i == 0 {
			return 0
		}
		return bounds[i-1]
	}
	lower, below := 0.0, uint64(0)
	if i > 0 {
		lower, below = bounds[i-1], cumulative[i-1]
	}
	inBucket := cumulative[i] - below
	if inBucket == 0 {
		return bounds[i]
	}
	return lower + (bounds[i]-lower)*(rank-float64(below))/float64(inBucket)
}

// deliveriesByOutcome reads chronos_nas_deliveries_total by outcome; every
// known outcome is present, 0 when none.
func (m *Metrics) deliveriesByOutcome() map[string]int64 {
	out := make(map[string]int64, len(m.byOutcome))
	for name, c := range m.byOutcome {
		var d dto.Metric
		if err := c.Write(&d); err == nil && d.Counter != nil {
			out[name] = int64(d.Counter.GetValue())
		}
	}
	return out
}
