package memory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// queue is the engine's armed rows, and the claims and leases of their
// fires: relay.Armed (but the failed-fire feed) and relay.Queue (but Down).
type queue struct{ *core }

// Arm implements relay.Armed.
func (q *queue) Arm(ctx context.Context, req relay.ArmRequest) (relay.ArmResult, error) {
	switch {
	case req.AgentID == "":
		return relay.ArmResult{}, errors.New("memory: arm: empty agent id")
	case req.JobID == "":
		return relay.ArmResult{}, errors.New("memory: arm: empty job id")
	case req.ScheduleID == "":
		return relay.ArmResult{}, errors.New("memory: arm: empty schedule id")
	case req.FireAt.IsZero():
		return relay.ArmResult{}, errors.New("memory: arm: zero fire_at")
	case req.Flex < 0 || req.Flex > relay.MaxFlex:
		return relay.ArmResult{}, fmt.Errorf("memory: arm: flexible window %s is not within 0 and %s", req.Flex, relay.MaxFlex)
	case !req.DueAt.IsZero() && (req.DueAt.Before(req.FireAt) || req.DueAt.After(req.FireAt.Add(req.Flex))):
		return relay.ArmResult{}, fmt.Errorf("memory: arm: due %s is outside the window of fire_at %s", req.DueAt, req.FireAt)
	}
	dueAt := req.DueAt
	if dueAt.IsZero() {
		dueAt = req.FireAt
	}
	if err := q.lock(ctx); err != nil {
		return relay.ArmResult{}, fmt.Errorf("memory: arm: %w", err)
	}
	defer q.mu.Unlock()

	k := key{req.AgentID, req.JobID}
	old := q.rows[k]
	if old != nil && old.shot.FireAt.Equal(req.FireAt) && old.shot.Flex == req.Flex {
		// The same fire: keep its schedule id, but follow an agent that
		// moved its callback URL or instance, or wrote the instant anew.
		old.shot.FireAtSpelling = req.FireAtSpelling
		if req.CallbackURL != "" {
			old.shot.CallbackURL = req.CallbackURL
		}
		if req.InstanceID != "" {
			old.shot.InstanceID = req.InstanceID
		}
		var rekeyed bool
		old.shot.Direct, rekeyed = relay.ArmKey(old.shot.Direct, req)
		return relay.ArmResult{OneShot: old.shot, Rekeyed: rekeyed}, nil
	}
	if old == nil && req.MaxArmed > 0 && len(q.jobs[req.AgentID]) >= req.MaxArmed {
		return relay.ArmResult{}, fmt.Errorf("memory: arm: %w", relay.ErrQuotaExceeded)
	}
	if other := q.byID[req.ScheduleID]; other != nil && other != old {
		return relay.ArmResult{}, fmt.Errorf("memory: arm: schedule id %q is in use", req.ScheduleID)
	}
	var res relay.ArmResult
	direct := req.Direct
	if old != nil {
		res.Replaced = old.shot.ScheduleID
		direct, res.Rekeyed = relay.ArmKey(old.shot.Direct, req)
		q.remove(old)
	}
	now := q.now()
	q.seq++
	dueMs := ceilMs(dueAt)
	tc := q.ties[req.AgentID]
	if tc.ms == dueMs {
		tc.n++
	} else {
		tc = tieCount{ms: dueMs}
	}
	q.ties[req.AgentID] = tc
	ent := &entry{
		shot: relay.OneShot{
			ScheduleID:     req.ScheduleID,
			AgentID:        req.AgentID,
			InstanceID:     req.InstanceID,
			JobID:          req.JobID,
			FireAt:         req.FireAt,
			FireAtSpelling: req.FireAtSpelling,
			CallbackURL:    req.CallbackURL,
			Flex:           req.Flex,
			State:          relay.StateArmed,
			DueAt:          dueAt,
			CreatedAt:      now,
			Direct:         direct,
		},
		dueMs:   dueMs,
		seq:     q.seq,
		tie:     min(tc.n, maxTie),
		dueIdx:  -1,
		leasIdx: -1,
	}
	q.insert(ent)
	for _, id := range q.deadJobs[k] {
		q.dead[id].superseded = true
	}
	res.OneShot = ent.shot
	res.Changed = true
	q.signal()
	return res, nil
}

// Cancel implements relay.Armed.
func (q *queue) Cancel(ctx context.Context, agentID, jobID string) (bool, error) {
	if err := q.lock(ctx); err != nil {
		return false, fmt.Errorf("memory: cancel: %w", err)
	}
	defer q.mu.Unlock()
	ent := q.rows[key{agentID, jobID}]
	if ent == nil {
		return false, nil
	}
	q.remove(ent)
	return true, nil
}

// Get implements relay.Armed.
func (q *queue) Get(ctx context.Context, agentID, jobID string) (relay.OneShot, error) {
	if err := q.lock(ctx); err != nil {
		return relay.OneShot{}, fmt.Errorf("memory: get: %w", err)
	}
	defer q.mu.Unlock()
	ent := q.rows[key{agentID, jobID}]
	if ent == nil {
		return relay.OneShot{}, fmt.Errorf("memory: get %s/%s: %w", agentID, jobID, relay.ErrNotFound)
	}
	return ent.shot, nil
}

// List implements relay.Armed. A cursor is bound to the agent it was issued
// for; limit <= 0 means 100.
func (q *queue) List(ctx context.Context, agentID, cursor string, limit int) ([]relay.OneShot, string, error) {
	after, err := relay.DecodeCursor(relay.CursorArmed, agentID, cursor)
	if err != nil {
		return nil, "", fmt.Errorf("memory: list: %w", err)
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	if err := q.lock(ctx); err != nil {
		return nil, "", fmt.Errorf("memory: list: %w", err)
	}
	defer q.mu.Unlock()
	jobs := q.jobs[agentID]
	i := 0
	if cursor != "" {
		var found bool
		i, found = slices.BinarySearch(jobs, after)
		if found {
			i++
		}
	}
	var items []relay.OneShot
	for ; i < len(jobs) && len(items) < limit; i++ {
		items = append(items, q.rows[key{agentID, jobs[i]}].shot)
	}
	next := ""
	if i < len(jobs) {
		next = relay.EncodeCursor(relay.CursorArmed, agentID, items[len(items)-1].JobID)
	}
	return items, next, nil
}

// NextDue implements relay.Queue.
func (q *queue) NextDue(ctx context.Context) (time.Duration, bool, error) {
	if err := q.lock(ctx); err != nil {
		return 0, false, fmt.Errorf("memory: next due: %w", err)
	}
	defer q.mu.Unlock()
	next, ok := int64(0), false
	if len(q.due) > 0 {
		next, ok = q.due[0].dueMs, true
	}
	if g, gated := q.nextGate(); gated && (!ok || g < next) {
		next, ok = g, true
	}
	if !ok {
		return 0, false, nil
	}
	wait := time.UnixMilli(next).Sub(q.now())
	return max(wait, 0), true, nil
}

// Wake implements relay.Queue: the channel is closed when an arm, a nack, a
// replay or a reap next puts an entry on the due heap.
func (q *queue) Wake() <-chan struct{} { return q.wake.C() }

// Extend implements relay.Queue.
func (q *queue) Extend(ctx context.Context, l relay.Lease, leaseFor time.Duration) (relay.Lease, error) {
	if leaseFor <= 0 {
		return relay.Lease{}, fmt.Errorf("memory: extend: lease duration %s is not positive", leaseFor)
	}
	if err := q.lock(ctx); err != nil {
		return relay.Lease{}, fmt.Errorf("memory: extend: %w", err)
	}
	defer q.mu.Unlock()
	ent, err := q.held(l)
	if err != nil {
		return relay.Lease{}, fmt.Errorf("memory: extend %s: %w", l.ScheduleID, err)
	}
	until := q.now().Add(leaseFor)
	ent.untilMs = ceilMs(until)
	q.leases.fix(ent)
	ent.shot.State = relay.StateLeased
	return relay.Lease{OneShot: ent.shot, Token: ent.token, Until: until}, nil
}

// Ack implements relay.Queue.
func (q *queue) Ack(ctx context.Context, l relay.Lease) error {
	if err := q.lock(ctx); err != nil {
		return fmt.Errorf("memory: ack: %w", err)
	}
	defer q.mu.Unlock()
	ent, err := q.held(l)
	if err != nil {
		return fmt.Errorf("memory: ack %s: %w", l.ScheduleID, err)
	}
	q.agent(l.AgentID).answered()
	q.remove(ent)
	return nil
}

// Nack implements relay.Queue.
func (q *queue) Nack(ctx context.Context, l relay.Lease, delay time.Duration, reason string) error {
	if err := q.lock(ctx); err != nil {
		return fmt.Errorf("memory: nack: %w", err)
	}
	defer q.mu.Unlock()
	ent, err := q.held(l)
	if err != nil {
		return fmt.Errorf("memory: nack %s: %w", l.ScheduleID, err)
	}
	q.requeue(ent, delay, reason)
	return nil
}

// Kill implements relay.Queue.
func (q *queue) Kill(ctx context.Context, l relay.Lease, reason string) error {
	if err := q.lock(ctx); err != nil {
		return fmt.Errorf("memory: kill: %w", err)
	}
	defer q.mu.Unlock()
	ent, err := q.held(l)
	if err != nil {
		return fmt.Errorf("memory: kill %s: %w", l.ScheduleID, err)
	}
	q.remove(ent)
	shot := ent.shot
	shot.State = relay.StateDead
	shot.LastError = reason
	dl := relay.DeadLetter{OneShot: shot, Reason: reason, FailedAt: q.now()}
	q.seq++
	d := &deadEntry{dl: dl, seq: q.seq}
	q.dead[shot.ScheduleID] = d
	q.deadList = append(q.deadList, d)
	k := key{shot.AgentID, shot.JobID}
	q.deadJobs[k] = append(q.deadJobs[k], shot.ScheduleID)
	// A fire that dies again after a replay moves to the end of the feed.
	feed := slices.DeleteFunc(q.failed[shot.AgentID], func(f failedRef) bool { return f.id == shot.ScheduleID })
	feed = append(feed, failedRef{id: shot.ScheduleID, at: dl.FailedAt})
	if over := len(feed) - relay.FailedFeedCap; over > 0 {
		feed = slices.Delete(feed, 0, over)
	}
	q.failed[shot.AgentID] = feed
	return nil
}

// Reap implements relay.Queue: expired leases go back to armed, due now,
// with the reason "lease expired".
func (q *queue) Reap(ctx context.Context) (int, error) {
	if err := q.lock(ctx); err != nil {
		return 0, fmt.Errorf("memory: reap: %w", err)
	}
	defer q.mu.Unlock()
	now := q.now()
	nowMs := now.UnixMilli()
	n := 0
	for len(q.leases) > 0 && q.leases[0].untilMs <= nowMs {
		ent := q.leases[0]
		q.leases.remove(ent)
		q.endLease(ent)
		ent.token = 0
		ent.shot.State = relay.StateArmed
		ent.shot.DueAt = now
		ent.shot.LastError = "lease expired"
		ent.dueMs = nowMs
		q.due.push(ent)
		n++
	}
	// The safety net: every agent with held fires and room gets them back.
	if q.releaseAll() || n > 0 {
		q.signal()
	}
	return n, nil
}

// Stats implements relay.Engine.
func (q *queue) Stats(ctx context.Context) (relay.Stats, error) {
	if err := q.lock(ctx); err != nil {
		return relay.Stats{}, fmt.Errorf("memory: stats: %w", err)
	}
	defer q.mu.Unlock()
	st := relay.Stats{
		Armed:      int64(len(q.rows)),
		Due:        int64(q.due.countDue(0, q.now().UnixMilli())),
		Leased:     int64(len(q.leases)),
		DeadLetter: int64(len(q.dead)),
	}
	for _, a := range q.agents {
		st.Held += int64(len(a.held))
		if a.probing {
			st.Probing++
		}
	}
	return st, nil
}

// Claim implements relay.Queue. Entries come out in due order, ties in arm
// order, under flow: a due entry whose agent has no room is moved to the
// agent's held heap instead. Each claim takes a fresh fencing token from an
// engine-wide counter, so a token is never handed out twice, not even after
// a replay resets the attempt counter.
func (q *queue) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	if max <= 0 {
		return nil, nil
	}
	if leaseFor <= 0 {
		return nil, fmt.Errorf("memory: claim: lease duration %s is not positive", leaseFor)
	}
	if err := q.lock(ctx); err != nil {
		return nil, fmt.Errorf("memory: claim: %w", err)
	}
	defer q.mu.Unlock()
	now := q.now()
	nowMs := now.UnixMilli()
	until := now.Add(leaseFor)
	untilMs := ceilMs(until)
	// Agents whose gate passed, or whose room grew, get their held fires
	// back first, by this claim's flow.
	for _, a := range q.agents {
		if len(a.held) > 0 {
			a.ep = a.policy.Effective(flow).Parallelism
			q.release(a, nowMs)
		}
	}
	var out []relay.Lease
	// ClaimedAt is by this process's clock, not the engine's (see
	// relay.Lease.ClaimedAt): deliverers judge its age with time.Since.
	claimed := time.Now()
	for len(out) < max && len(q.due) > 0 && q.due[0].dueMs <= nowMs {
		ent := q.due[0]
		q.due.remove(ent)
		a := q.agent(ent.shot.AgentID)
		p := a.policy.Effective(flow)
		a.ep = p.Parallelism
		if a.room(p.Parallelism, nowMs) == 0 {
			ent.held = true
			a.held.push(ent)
			continue
		}
		if p.Rate > 0 {
			a.tatMs = math.Max(a.tatMs, float64(nowMs)) + 1000/p.Rate
		}
		q.tokens++
		ent.token = q.tokens
		ent.untilMs = untilMs
		ent.shot.Attempt++
		ent.shot.State = relay.StateLeased
		q.leases.push(ent)
		a.leased[ent] = struct{}{}
		out = append(out, relay.Lease{OneShot: ent.shot, Token: ent.token, Until: until,
			ClaimedAt: claimed, InstanceStopped: q.stopped[ent.shot.InstanceID], AgentFailures: a.failures})
		q.pullForward(a, now, nowMs)
	}
	return out, nil
}

// pullForward makes a's armed fires whose flexible window has opened due
// now, so that they go out in the wake a claim just started.
func (q *queue) pullForward(a *agentState, now time.Time, nowMs int64) {
	for ent := range a.flex {
		if ent.dueIdx >= 0 && !ent.held && ent.dueMs > nowMs && !ent.shot.FireAt.After(now) {
			ent.dueMs = nowMs
			ent.shot.DueAt = now
			q.due.fix(ent)
		}
	}
}

// DueHistogram implements relay.History: one-shots leased now count at
// their due time too (a retry of theirs is due again then or later).
func (q *queue) DueHistogram(ctx context.Context, from time.Time, step time.Duration, n int) ([]int64, error) {
	if step <= 0 || n <= 0 {
		return nil, fmt.Errorf("memory: due histogram: step %s and n %d must be positive", step, n)
	}
	if err := q.lock(ctx); err != nil {
		return nil, fmt.Errorf("memory: due histogram: %w", err)
	}
	defer q.mu.Unlock()
	out := make([]int64, n)
	fromMs, stepMs := from.UnixMilli(), step.Milliseconds()
	for _, ent := range q.rows {
		if d := ent.dueMs - fromMs; d >= 0 {
			if i := d / stepMs; i < int64(n) {
				out[i]++
			}
		}
	}
	return out, nil
}
