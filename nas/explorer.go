package nas

// The operator dashboard's explorer: the delivery history the dispatchers
// keep in the store (relay.History), the agents NAS knows with their armed
// count, last delivery and flow state, one agent's armed fires and recent
// deliveries, and the processes dispatching. Everything is read from the
// store: every NAS process sharing it answers the same.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// Bounds of the explorer's reads.
const (
	// explorerDeadMax bounds the dead letters read to chart them.
	explorerDeadMax = 1000
	// explorerArmedMax bounds the armed fires of one agent read to sort
	// them by time.
	explorerArmedMax = 10000
	// ExplorerMaxLimit bounds a page of the explorer's lists.
	ExplorerMaxLimit = 500
	// ProcessAliveWithin is how recent a process's beat must be for it to
	// count as alive.
	ProcessAliveWithin = 15 * time.Second
)

// errNoHistory is the answer of the explorer on an engine that keeps no
// history.
func errNoHistory() *contract.Error {
	return contract.Errorf(http.StatusInternalServerError, contract.CodeServerError, "the store keeps no delivery history")
}

func (s *Explorer) historyStore() (relay.History, error) {
	h, ok := s.engine.(relay.History)
	if !ok {
		return nil, errNoHistory()
	}
	return h, nil
}

// History reads the delivery history of the last hour (window
// contract.HistoryWindowHour, a point a minute) or day (HistoryWindowDay, a
// point per ten minutes), the dead letters by when they failed, and the
// fires due in each hour of the next 24.
func (s *Explorer) History(ctx context.Context, win string) (contract.OperatorHistory, error) {
	h, err := s.historyStore()
	if err != nil {
		return contract.OperatorHistory{}, err
	}
	step, n := time.Minute, 60
	switch win {
	case contract.HistoryWindowHour:
	case contract.HistoryWindowDay:
		step, n = 10*time.Minute, 144
	default:
		return contract.OperatorHistory{}, contract.BadRequest(contract.CodeInvalidRequest, "window must be %q or %q", contract.HistoryWindowHour, contract.HistoryWindowDay)
	}
	now := s.now().UTC()
	from := now.Truncate(step).Add(-time.Duration(n-1) * step)
	to := from.Add(time.Duration(n) * step)
	minutes, err := h.HistoryMinutes(ctx, from, to)
	if err != nil {
		return contract.OperatorHistory{}, fmt.Errorf("history: %w", err)
	}
	sums := make([]relay.HistoryMinute, n)
	for _, m := range minutes {
		if i := int(m.Minute.Sub(from) / step); i >= 0 && i < n {
			sums[i].Add(m)
		}
	}
	out := contract.OperatorHistory{GeneratedAt: contract.NewTime(now), Window: win, StepSeconds: int(step / time.Second),
		Points: make([]contract.HistoryPoint, n), Totals: map[string]int64{}}
	for _, o := range relay.HistoryOutcomes {
		out.Totals[o] = 0
	}
	var window relay.HistoryMinute
	for _, m := range sums {
		window.Add(m)
	}
	out.LagP50Seconds, out.LagP99Seconds = lagQuantile(window.Lag, 0.5), lagQuantile(window.Lag, 0.99)
	for i, m := range sums {
		p := contract.HistoryPoint{At: contract.NewTime(from.Add(time.Duration(i) * step)), Outcomes: map[string]int64{}, Retries: m.Retries}
		for _, o := range relay.HistoryOutcomes {
			p.Outcomes[o] = m.Outcomes[o]
			out.Totals[o] += m.Outcomes[o]
		}
		p.LagP50Seconds, p.LagP99Seconds = lagQuantile(m.Lag, 0.5), lagQuantile(m.Lag, 0.99)
		out.Points[i] = p
	}
	if out.DeadLetterTruncated, err = s.chartDead(ctx, out.Points, from, step); err != nil {
		return contract.OperatorHistory{}, fmt.Errorf("history: %w", err)
	}
	dueFrom := now.Truncate(time.Hour)
	if out.Due, err = h.DueHistogram(ctx, dueFrom, time.Hour, 24); err != nil {
		return contract.OperatorHistory{}, fmt.Errorf("history: %w", err)
	}
	out.DueFrom = contract.NewTime(dueFrom)
	return out, nil
}

// chartDead counts the dead letters into the points by when they failed,
// reading at most explorerDeadMax of them, newest first; it reports
// whether it stopped before the window's start.
func (s *Explorer) chartDead(ctx context.Context, points []contract.HistoryPoint, from time.Time, step time.Duration) (bool, error) {
	cursor, read := "", 0
	for {
		items, next, err := s.engine.ListDead(ctx, "", cursor, contract.MaxListLimit)
		if err != nil {
			return false, err
		}
		for _, d := range items {
			read++
			if d.FailedAt.Before(from) {
				return false, nil
			}
			if i := int(d.FailedAt.Sub(from) / step); i < len(points) {
				points[i].DeadLettered++
			}
		}
		if next == "" {
			return false, nil
		}
		if read >= explorerDeadMax {
			return true, nil
		}
		cursor = next
	}
}

// lagQuantile estimates quantile q of the lag buckets (the bounds of
// relay.HistoryLagBounds); nil when they count nothing.
func lagQuantile(buckets []int64, q float64) *float64 {
	var total uint64
	cumulative := make([]uint64, 0, len(buckets))
	for _, n := range buckets {
		total += uint64(max(n, 0))
		cumulative = append(cumulative, total)
	}
	if total == 0 {
		return nil
	}
	bounds := append(append([]float64(nil), relay.HistoryLagBounds...), math.Inf(1))
	v := histogramQuantile(q, bounds[:len(cumulative)], cumulative, total)
	return &v
}

// Agents lists the agents NAS knows whose id contains query (any case):
// those the agents file lists, those holding armed fires, those with a flow
// state and those with recent deliveries, in id order, paged by an offset
// cursor.
func (s *Explorer) Agents(ctx context.Context, query, cursor string, limit int) (contract.OperatorAgents, error) {
	h, err := s.historyStore()
	if err != nil {
		return contract.OperatorAgents{}, err
	}
	offset, err := offsetCursor(cursor)
	if err != nil {
		return contract.OperatorAgents{}, err
	}
	limit = pageLimit(limit)
	armed, err := s.armedCounts(ctx)
	if err != nil {
		return contract.OperatorAgents{}, fmt.Errorf("agents: %w", err)
	}
	flows, _, err := s.agentFlows(ctx)
	if err != nil {
		return contract.OperatorAgents{}, fmt.Errorf("agents: %w", err)
	}
	last, err := h.LastDeliveries(ctx)
	if err != nil {
		return contract.OperatorAgents{}, fmt.Errorf("agents: %w", err)
	}
	byID := map[string]contract.AgentFlowState{}
	for _, f := range flows {
		byID[f.AgentID] = f
	}
	ids := map[string]bool{}
	for a := range armed {
		ids[a] = true
	}
	for a := range byID {
		ids[a] = true
	}
	for a := range last {
		ids[a] = true
	}
	if s.source != nil {
		policies, _ := s.source.AgentPolicies()
		for a := range policies {
			ids[a] = true
		}
	}
	q := strings.ToLower(query)
	matched := make([]string, 0, len(ids))
	for a := range ids {
		if q == "" || strings.Contains(strings.ToLower(a), q) {
			matched = append(matched, a)
		}
	}
	sort.Strings(matched)
	out := contract.OperatorAgents{Agents: []contract.AgentSummary{}, Total: len(matched)}
	if offset > len(matched) {
		offset = len(matched)
	}
	page := matched[offset:min(offset+limit, len(matched))]
	for _, a := range page {
		out.Agents = append(out.Agents, s.agentSummary(a, armed[a], byID[a], last))
	}
	if end := offset + len(page); end < len(matched) {
		next := strconv.Itoa(end)
		out.NextCursor = &next
	}
	return out, nil
}

// agentSummary puts together what the explorer lists of one agent; an
// agent without a flow state of its own gets the defaults.
func (s *Explorer) agentSummary(agentID string, armed int64, flow contract.AgentFlowState, last map[string]relay.DeliveryRecord) contract.AgentSummary {
	if flow.AgentID == "" {
		p := relay.AgentPolicy{}.Effective(s.cfg.Relay.Flow())
		flow = contract.AgentFlowState{AgentID: agentID, Parallelism: p.Parallelism, Rate: p.Rate}
	}
	sum := contract.AgentSummary{AgentID: agentID, Armed: armed, Flow: flow, State: flowWord(flow)}
	if r, ok := last[agentID]; ok {
		a := deliveryAttempt(r)
		sum.LastDelivery = &a
	}
	return sum
}

// flowWord says in one word what holds an agent's fires.
func flowWord(f contract.AgentFlowState) string {
	switch {
	case f.Disabled:
		return "disabled"
	case f.Probing:
		return "probing"
	case f.GateUntil != nil:
		return "waiting"
	case f.Held > 0:
		return "limited"
	}
	return "delivering"
}

func deliveryAttempt(r relay.DeliveryRecord) contract.DeliveryAttempt {
	return contract.DeliveryAttempt{JobID: r.JobID, ScheduleID: r.ScheduleID, FireAt: contract.NewTime(r.FireAt.UTC()),
		Attempt: r.Attempt, Outcome: r.Outcome, Reason: r.Reason, LagSeconds: r.Lag.Seconds(), At: contract.NewTime(r.At.UTC())}
}

// armedCounts returns the armed count of every agent holding fires, from
// the overview's census (read afresh when it is stale).
func (s *Explorer) armedCounts(ctx context.Context) (map[string]int64, error) {
	c, ok := s.engine.(relay.Census)
	if !ok {
		return map[string]int64{}, nil
	}
	s.census.mu.Lock()
	defer s.census.mu.Unlock()
	if err := s.census.fresh(ctx, c); err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(s.census.agents))
	for _, a := range s.census.agents {
		out[a.AgentID] = a.Armed
	}
	return out, nil
}

// Agent returns one agent's summary and recent deliveries; an agent NAS
// does not know is 404.
func (s *Explorer) Agent(ctx context.Context, agentID string) (contract.OperatorAgent, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.OperatorAgent{}, e
	}
	h, err := s.historyStore()
	if err != nil {
		return contract.OperatorAgent{}, err
	}
	recent, err := h.RecentDeliveries(ctx, agentID, 0)
	if err != nil {
		return contract.OperatorAgent{}, fmt.Errorf("agent: %w", err)
	}
	if len(recent) == 0 {
		if err := s.checkAgentKnown(ctx, agentID); err != nil {
			return contract.OperatorAgent{}, s.operatorErr("agent", err)
		}
	}
	flows, _, err := s.agentFlows(ctx)
	if err != nil {
		return contract.OperatorAgent{}, fmt.Errorf("agent: %w", err)
	}
	var flow contract.AgentFlowState
	for _, f := range flows {
		if f.AgentID == agentID {
			flow = f
		}
	}
	armed, err := s.countArmed(ctx, agentID)
	if err != nil {
		return contract.OperatorAgent{}, fmt.Errorf("agent: %w", err)
	}
	last := map[string]relay.DeliveryRecord{}
	if len(recent) > 0 {
		last[agentID] = recent[0]
	}
	out := contract.OperatorAgent{Agent: s.agentSummary(agentID, armed, flow, last), Recent: make([]contract.DeliveryAttempt, 0, len(recent))}
	for _, r := range recent {
		out.Recent = append(out.Recent, deliveryAttempt(r))
	}
	return out, nil
}

// countArmed counts agentID's armed fires (up to explorerArmedMax).
func (s *Explorer) countArmed(ctx context.Context, agentID string) (int64, error) {
	all, err := s.readArmed(ctx, agentID)
	return int64(len(all)), err
}

// readArmed reads agentID's armed fires, at most explorerArmedMax.
func (s *Explorer) readArmed(ctx context.Context, agentID string) ([]relay.OneShot, error) {
	var all []relay.OneShot
	cursor := ""
	for len(all) < explorerArmedMax {
		items, next, err := s.engine.List(ctx, agentID, cursor, contract.MaxListLimit)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			break
		}
		cursor = next
	}
	return all, nil
}

// AgentArmed pages agentID's armed fires whose job id contains job (any
// case), next first (fire_at, then job id), by an offset cursor.
func (s *Explorer) AgentArmed(ctx context.Context, agentID, job, cursor string, limit int) (contract.AgentArmedPage, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.AgentArmedPage{}, e
	}
	offset, err := offsetCursor(cursor)
	if err != nil {
		return contract.AgentArmedPage{}, err
	}
	limit = pageLimit(limit)
	all, err := s.readArmed(ctx, agentID)
	if err != nil {
		return contract.AgentArmedPage{}, fmt.Errorf("armed fires: %w", err)
	}
	if len(all) == 0 {
		if err := s.checkAgentKnown(ctx, agentID); err != nil {
			return contract.AgentArmedPage{}, s.operatorErr("armed fires", err)
		}
	}
	q := strings.ToLower(job)
	matched := all[:0]
	for _, o := range all {
		if q == "" || strings.Contains(strings.ToLower(o.JobID), q) {
			matched = append(matched, o)
		}
	}
	sort.Slice(matched, func(i, j int) bool {
		if !matched[i].FireAt.Equal(matched[j].FireAt) {
			return matched[i].FireAt.Before(matched[j].FireAt)
		}
		return matched[i].JobID < matched[j].JobID
	})
	out := contract.AgentArmedPage{Armed: []contract.ArmedFire{}, Total: len(matched)}
	if offset > len(matched) {
		offset = len(matched)
	}
	page := matched[offset:min(offset+limit, len(matched))]
	for _, o := range page {
		out.Armed = append(out.Armed, contract.ArmedFire{JobID: o.JobID, ScheduleID: o.ScheduleID, FireAt: contract.NewTime(o.FireAt.UTC()),
			InstanceID: o.InstanceID, Attempt: o.Attempt, Direct: o.Direct.IsDirect(), DueAt: contract.NewTime(o.DueAt.UTC()), Error: o.LastError})
	}
	if end := offset + len(page); end < len(matched) {
		next := strconv.Itoa(end)
		out.NextCursor = &next
	}
	return out, nil
}

// Processes lists the processes dispatching fires whose beat is at most
// ProcessAliveWithin old.
func (s *Explorer) Processes(ctx context.Context) (contract.OperatorProcesses, error) {
	h, err := s.historyStore()
	if err != nil {
		return contract.OperatorProcesses{}, err
	}
	beats, err := h.Processes(ctx, s.now().Add(-ProcessAliveWithin))
	if err != nil {
		return contract.OperatorProcesses{}, fmt.Errorf("processes: %w", err)
	}
	out := contract.OperatorProcesses{Processes: make([]contract.DispatchProcess, 0, len(beats)), AliveWithinSeconds: int(ProcessAliveWithin / time.Second)}
	for _, b := range beats {
		p := contract.DispatchProcess{ID: b.ID, Kind: b.Kind, Host: b.Host, PID: b.PID, Dispatchers: b.Dispatchers,
			StartedAt: contract.NewTime(b.StartedAt.UTC()), BeatAt: contract.NewTime(b.BeatAt.UTC()), Delivered: b.Delivered}
		if !b.LastClaim.IsZero() {
			t := contract.NewTime(b.LastClaim.UTC())
			p.LastClaim = &t
		}
		out.Processes = append(out.Processes, p)
	}
	return out, nil
}

// offsetCursor reads an explorer cursor: the offset of the page's first
// item, as a previous page's next_cursor gave it.
func offsetCursor(cursor string) (int, error) {
	if cursor == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(cursor)
	if err != nil || n < 0 || strconv.Itoa(n) != cursor {
		return 0, contract.BadRequest(contract.CodeInvalidCursor, "cursor is not one NAS issued")
	}
	return n, nil
}

// pageLimit is limit within (0, ExplorerMaxLimit], 50 when unset.
func pageLimit(limit int) int {
	if limit <= 0 {
		return 50
	}
	return min(limit, ExplorerMaxLimit)
}
