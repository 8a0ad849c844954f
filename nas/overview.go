package nas

// The operator's overview: what the dashboard shows besides the dead letter
// and the unarmed jobs, which have routes of their own.

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// overviewMax bounds the agents and the stopped instances of an overview.
const overviewMax = 1000

// An overview reuses the census it read for ten times as long as reading it
// took, within these bounds: on Redis the census scans the keyspace, and
// every open dashboard polls every 3 s, so a large store is scanned at most
// a tenth of the time, while a small one is read afresh on every poll.
const (
	minCensusTTL = time.Second
	maxCensusTTL = time.Minute
)

// censusCache holds the last census an overview read; the explorer's
// agent list reads it too, and the operator's actions invalidate it.
type censusCache struct {
	*core
	mu                      sync.Mutex
	at                      time.Time     // when it was read; zero: never, or invalidated
	ttl                     time.Duration // how long it is reused
	agents                  []contract.AgentArmedCount
	stopped                 []contract.StoppedInstance
	agentsMore, stoppedMore bool
}

// fresh reads the census afresh when the cached one is stale; the caller
// holds s.mu. How long the read took (by the monotonic clock, not the
// service's) sets how long it is reused.
func (s *censusCache) fresh(ctx context.Context, c relay.Census) error {
	if now := s.now(); s.at.IsZero() || now.Sub(s.at) >= s.ttl || now.Before(s.at) {
		start := time.Now()
		if err := s.read(ctx, c); err != nil {
			return err
		}
		s.at, s.ttl = now, min(max(10*time.Since(start), minCensusTTL), maxCensusTTL)
	}
	return nil
}

// invalidate makes the next overview read the census afresh: an operator
// who just stopped an instance or replayed fires sees it at once.
func (s *censusCache) invalidate() {
	s.mu.Lock()
	s.at = time.Time{}
	s.mu.Unlock()
}

// read reads the agents holding fires and the stopped instances (with when
// they were stopped) into s; the caller holds s.mu.
func (s *censusCache) read(ctx context.Context, c relay.Census) error {
	agents, agentsMore, err := c.ArmedByAgent(ctx, overviewMax)
	if err != nil {
		return err
	}
	ids, stoppedMore, err := c.StoppedInstances(ctx, overviewMax)
	if err != nil {
		return err
	}
	stopped := make([]contract.StoppedInstance, 0, len(ids))
	for _, id := range ids {
		inst := contract.StoppedInstance{InstanceID: id}
		info, err := s.engine.Instance(ctx, id)
		if err != nil {
			return err
		}
		if !info.StoppedAt.IsZero() {
			at := contract.NewTime(info.StoppedAt.UTC())
			inst.StoppedAt = &at
		}
		stopped = append(stopped, inst)
	}
	counts := make([]contract.AgentArmedCount, 0, len(agents))
	for _, a := range agents {
		counts = append(counts, contract.AgentArmedCount{AgentID: a.AgentID, Armed: a.Armed})
	}
	s.agents, s.stopped = counts, stopped
	s.agentsMore, s.stoppedMore = agentsMore, stoppedMore
	return nil
}

// Explorer is what the operator's dashboard reads: the overview, the
// history, the agents and their armed fires, the relay processes. It is
// safe for concurrent use.
type Explorer struct {
	*core
	census *censusCache // the overview's agents and stopped instances
}

// Overview gathers the operator's overview: the store's gauges, the agents
// holding fires (when the engine implements relay.Census), this process's
// fire lag percentiles and deliveries by outcome, and stopped instances.
func (s *Explorer) Overview(ctx context.Context) (contract.OperatorOverview, error) {
	st, err := s.engine.Stats(ctx)
	if err != nil {
		return contract.OperatorOverview{}, fmt.Errorf("overview: %w", err)
	}
	ov := contract.OperatorOverview{
		GeneratedAt: contract.NewTime(s.now().UTC()),
		Store: contract.StoreGauges{Armed: st.Armed, DueBacklog: st.Due, Leased: st.Leased, DeadLetter: st.DeadLetter,
			Held: st.Held, Probing: st.Probing},
		Agents:           []contract.AgentArmedCount{},
		StoppedInstances: []contract.StoppedInstance{},
		FireLag:          s.metrics.fireLagSummary(),
		Deliveries:       s.metrics.deliveriesByOutcome(),
	}
	if ov.AgentFlows, ov.AgentFlowsTruncated, err = s.agentFlows(ctx); err != nil {
		return contract.OperatorOverview{}, fmt.Errorf("overview: %w", err)
	}
	c, ok := s.engine.(relay.Census)
	if !ok {
		return ov, nil
	}
	s.census.mu.Lock()
	defer s.census.mu.Unlock()
	if err := s.census.fresh(ctx, c); err != nil {
		return contract.OperatorOverview{}, fmt.Errorf("overview: %w", err)
	}
	ov.Agents = append(ov.Agents, s.census.agents...)
	ov.StoppedInstances = append(ov.StoppedInstances, s.census.stopped...)
	ov.AgentsTruncated, ov.StoppedTruncated = s.census.agentsMore, s.census.stoppedMore
	return ov, nil
}

// agentFlows reads every agent's flow state (relay.Flows.AgentFlows), with
// the defaults filled in and the agents the agents file disables, at most
// overviewMax of them in id order; it reports whether there were more.
func (s *Explorer) agentFlows(ctx context.Context) ([]contract.AgentFlowState, bool, error) {
	flows, err := s.engine.AgentFlows(ctx)
	if err != nil {
		return nil, false, err
	}
	byFile := map[string]bool{}
	if s.source != nil {
		policies, _ := s.source.AgentPolicies()
		for a, p := range policies {
			if p.Disabled {
				byFile[a] = true
			}
		}
	}
	seen := make(map[string]bool, len(flows))
	defaults := s.cfg.Relay.Flow()
	out := make([]contract.AgentFlowState, 0, len(flows)+len(byFile))
	for _, f := range flows {
		seen[f.AgentID] = true
		p := f.Policy.Effective(defaults)
		st := contract.AgentFlowState{
			AgentID: f.AgentID, InFlight: f.InFlight, Held: f.Held, Probing: f.Probing, Failures: f.Failures,
			Parallelism: p.Parallelism, Rate: p.Rate, Disabled: p.Disabled || byFile[f.AgentID], DisabledByFile: byFile[f.AgentID],
		}
		if f.GateUntil.After(s.now()) {
			t := contract.NewTime(f.GateUntil.UTC())
			st.GateUntil = &t
		}
		out = append(out, st)
	}
	for a := range byFile {
		if !seen[a] {
			// Not written to the store yet (it did not answer): shown as
			// the file says.
			p := relay.AgentPolicy{}.Effective(defaults)
			out = append(out, contract.AgentFlowState{AgentID: a, Parallelism: p.Parallelism, Rate: p.Rate, Disabled: true, DisabledByFile: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AgentID < out[j].AgentID })
	if len(out) > overviewMax {
		return out[:overviewMax], true, nil
	}
	return out, false, nil
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
