package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// ErrClosed is returned by every call made after Close.
var ErrClosed = errors.New("memory: engine closed")

// defaultListLimit is the page size of List and ListDead when limit <= 0.
const defaultListLimit = 100

// Options configure an Engine.
type Options struct {
	// Now is the engine's clock; leases, due times and ttls are judged by it
	// alone. Default time.Now.
	Now func() time.Time
}

// key names the armed row of one job of one agent.
type key struct{ agent, job string }

// entry is one one-shot: its armed row, due entry and lease in one record.
// An armed entry sits in the due heap, a leased one in the lease heap; never
// both.
type entry struct {
	shot    relay.OneShot
	dueMs   int64  // shot.DueAt in milliseconds, rounded up
	seq     uint64 // arm order, breaks ties between equal due times
	token   int64  // fencing token of the current lease; 0 when armed
	untilMs int64  // lease expiry in milliseconds, when leased
	dueIdx  int    // index in the due heap or its agent's held heap, or -1
	leasIdx int    // index in the lease heap, or -1
	held    bool   // dueIdx is in its agent's held heap (flow control)
}

// deadEntry is one dead letter.
type deadEntry struct {
	dl  relay.DeadLetter
	seq uint64 // kill order: ListDead pages newest (highest) first
	// superseded is set when the job was armed again after this fire died:
	// a replay then drops it instead of re-arming a stale fire.
	superseded bool
}

// failedRef is one entry of an agent's failed-fire feed: a dead letter the
// agent has not acknowledged.
type failedRef struct {
	id string    // schedule id of the dead letter
	at time.Time // when it was dead-lettered
}

// Engine is the in-memory relay.Engine. It is safe for concurrent use.
type Engine struct {
	now  func() time.Time
	wake relay.Broadcast

	mu       sync.Mutex
	closed   bool
	seq      uint64 // arm and kill order
	tokens   int64  // last fencing token handed out; never reused
	rows     map[key]*entry
	byID     map[string]*entry // schedule id → entry
	jobs     map[string][]string
	due      dueHeap
	leases   leaseHeap
	dead     map[string]*deadEntry  // schedule id → dead letter
	deadList []*deadEntry           // ascending seq
	deadJobs map[key][]string       // schedule ids of dead letters per job
	failed   map[string][]failedRef // agent → its failed-fire feed, oldest first
	stopped  map[string]bool
	seen     map[string]int64 // delivery id → expiry (ms)
	seenExp  expiryHeap

	// lastFires holds each job's last fire outcome (agent → job → record)
	// and instances what is known of each instance; see lastfire.go.
	lastFires map[string]map[string]*lastFireRecord
	instances map[string]*relay.InstanceInfo

	// agents holds each agent's flow state (see flow.go), phases counts
	// the spreading phases handed out.
	agents map[string]*agentState
	phases uint64

	// rekey holds each re-keyed agent's rekey floor (see rekey.go).
	rekey map[string]time.Time

	// history is the delivery history (see history.go), under histMu.
	histMu  sync.Mutex
	history *history
}

var _ relay.Engine = (*Engine)(nil)

// New returns an empty engine.
func New(opts Options) *Engine {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Engine{
		now:      now,
		rows:     make(map[key]*entry),
		byID:     make(map[string]*entry),
		jobs:     make(map[string][]string),
		dead:     make(map[string]*deadEntry),
		deadJobs: make(map[key][]string),
		failed:   make(map[string][]failedRef),
		stopped:  make(map[string]bool),
		seen:     make(map[string]int64),
		agents:   make(map[string]*agentState),
	}
}

// ceilMs returns t in Unix milliseconds, rounded up: a due time in whole
// milliseconds is then never earlier than t.
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// lock takes the mutex after checking ctx and that the engine is open.
func (e *Engine) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// signal wakes every waiting dispatcher.
func (e *Engine) signal() { e.wake.Notify() }

// Arm implements relay.Armed.
func (e *Engine) Arm(ctx context.Context, req relay.ArmRequest) (relay.ArmResult, error) {
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
	if err := e.lock(ctx); err != nil {
		return relay.ArmResult{}, fmt.Errorf("memory: arm: %w", err)
	}
	defer e.mu.Unlock()

	k := key{req.AgentID, req.JobID}
	old := e.rows[k]
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
	if old == nil && req.MaxArmed > 0 && len(e.jobs[req.AgentID]) >= req.MaxArmed {
		return relay.ArmResult{}, fmt.Errorf("memory: arm: %w", relay.ErrQuotaExceeded)
	}
	if other := e.byID[req.ScheduleID]; other != nil && other != old {
		return relay.ArmResult{}, fmt.Errorf("memory: arm: schedule id %q is in use", req.ScheduleID)
	}
	var res relay.ArmResult
	direct := req.Direct
	if old != nil {
		res.Replaced = old.shot.ScheduleID
		direct, res.Rekeyed = relay.ArmKey(old.shot.Direct, req)
		e.remove(old)
	}
	now := e.now()
	e.seq++
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
		dueMs:   ceilMs(dueAt),
		seq:     e.seq,
		dueIdx:  -1,
		leasIdx: -1,
	}
	e.insert(ent)
	for _, id := range e.deadJobs[k] {
		e.dead[id].superseded = true
	}
	res.OneShot = ent.shot
	res.Changed = true
	e.signal()
	return res, nil
}

// insert adds an armed entry to the row indexes and the due heap.
func (e *Engine) insert(ent *entry) {
	k := key{ent.shot.AgentID, ent.shot.JobID}
	e.rows[k] = ent
	e.byID[ent.shot.ScheduleID] = ent
	jobs := e.jobs[k.agent]
	i, _ := slices.BinarySearch(jobs, k.job)
	e.jobs[k.agent] = slices.Insert(jobs, i, k.job)
	e.due.push(ent)
	if ent.shot.Flex > 0 {
		e.agent(k.agent).flexAdd(ent)
	}
}

// remove deletes an entry from every index and heap.
func (e *Engine) remove(ent *entry) {
	k := key{ent.shot.AgentID, ent.shot.JobID}
	delete(e.rows, k)
	delete(e.byID, ent.shot.ScheduleID)
	jobs := e.jobs[k.agent]
	if i, ok := slices.BinarySearch(jobs, k.job); ok {
		jobs = slices.Delete(jobs, i, i+1)
	}
	if len(jobs) == 0 {
		delete(e.jobs, k.agent)
	} else {
		e.jobs[k.agent] = jobs
	}
	e.unqueue(ent)
	if ent.leasIdx >= 0 {
		e.leases.remove(ent)
		e.endLease(ent)
	}
	if ent.shot.Flex > 0 {
		if a := e.agents[k.agent]; a != nil {
			delete(a.flex, ent)
		}
	}
	ent.token = 0
}

// unqueue takes an armed entry off the due heap or its agent's held heap.
func (e *Engine) unqueue(ent *entry) {
	if ent.dueIdx < 0 {
		return
	}
	if ent.held {
		e.agents[ent.shot.AgentID].held.remove(ent)
		ent.held = false
		return
	}
	e.due.remove(ent)
}

// Cancel implements relay.Armed.
func (e *Engine) Cancel(ctx context.Context, agentID, jobID string) (bool, error) {
	if err := e.lock(ctx); err != nil {
		return false, fmt.Errorf("memory: cancel: %w", err)
	}
	defer e.mu.Unlock()
	ent := e.rows[key{agentID, jobID}]
	if ent == nil {
		return false, nil
	}
	e.remove(ent)
	return true, nil
}

// Get implements relay.Armed.
func (e *Engine) Get(ctx context.Context, agentID, jobID string) (relay.OneShot, error) {
	if err := e.lock(ctx); err != nil {
		return relay.OneShot{}, fmt.Errorf("memory: get: %w", err)
	}
	defer e.mu.Unlock()
	ent := e.rows[key{agentID, jobID}]
	if ent == nil {
		return relay.OneShot{}, fmt.Errorf("memory: get %s/%s: %w", agentID, jobID, relay.ErrNotFound)
	}
	return ent.shot, nil
}

// List implements relay.Armed. A cursor is bound to the agent it was issued
// for; limit <= 0 means 100.
func (e *Engine) List(ctx context.Context, agentID, cursor string, limit int) ([]relay.OneShot, string, error) {
	after, err := relay.DecodeCursor(relay.CursorArmed, agentID, cursor)
	if err != nil {
		return nil, "", fmt.Errorf("memory: list: %w", err)
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	if err := e.lock(ctx); err != nil {
		return nil, "", fmt.Errorf("memory: list: %w", err)
	}
	defer e.mu.Unlock()
	jobs := e.jobs[agentID]
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
		items = append(items, e.rows[key{agentID, jobs[i]}].shot)
	}
	next := ""
	if i < len(jobs) {
		next = relay.EncodeCursor(relay.CursorArmed, agentID, items[len(items)-1].JobID)
	}
	return items, next, nil
}

// ListFailed implements relay.Armed. It forgets the feed entries that
// expired or whose dead letter was replayed.
func (e *Engine) ListFailed(ctx context.Context, agentID string, keep time.Duration, max int) ([]relay.DeadLetter, error) {
	if max <= 0 {
		max = relay.FailedFeedCap
	}
	if err := e.lock(ctx); err != nil {
		return nil, fmt.Errorf("memory: list failed: %w", err)
	}
	defer e.mu.Unlock()
	expired := e.expiry(keep)
	feed := slices.DeleteFunc(e.failed[agentID], func(f failedRef) bool {
		return expired(f) || e.dead[f.id] == nil
	})
	if len(feed) == 0 {
		delete(e.failed, agentID)
		return nil, nil
	}
	e.failed[agentID] = feed
	out := make([]relay.DeadLetter, 0, min(max, len(feed)))
	for _, f := range feed[:min(max, len(feed))] {
		out = append(out, e.dead[f.id].dl)
	}
	return out, nil
}

// AckFailed implements relay.Armed.
func (e *Engine) AckFailed(ctx context.Context, agentID string, keep time.Duration, scheduleIDs []string) (int, error) {
	if err := e.lock(ctx); err != nil {
		return 0, fmt.Errorf("memory: ack failed: %w", err)
	}
	defer e.mu.Unlock()
	ack := make(map[string]bool, len(scheduleIDs))
	for _, id := range scheduleIDs {
		ack[id] = true
	}
	n := 0
	expired := e.expiry(keep)
	feed := slices.DeleteFunc(e.failed[agentID], func(f failedRef) bool {
		if !ack[f.id] {
			return false
		}
		if !expired(f) && e.dead[f.id] != nil {
			n++
		}
		return true
	})
	if len(feed) == 0 {
		delete(e.failed, agentID)
	} else {
		e.failed[agentID] = feed
	}
	return n, nil
}

// expiry returns whether a feed entry is older than keep by the engine's
// clock now (never when keep <= 0).
func (e *Engine) expiry(keep time.Duration) func(failedRef) bool {
	if keep <= 0 {
		return func(failedRef) bool { return false }
	}
	cutoff := e.now().Add(-keep)
	return func(f failedRef) bool { return f.at.Before(cutoff) }
}

// NextDue implements relay.Queue.
func (e *Engine) NextDue(ctx context.Context) (time.Duration, bool, error) {
	if err := e.lock(ctx); err != nil {
		return 0, false, fmt.Errorf("memory: next due: %w", err)
	}
	defer e.mu.Unlock()
	next, ok := int64(0), false
	if len(e.due) > 0 {
		next, ok = e.due[0].dueMs, true
	}
	if g, gated := e.nextGate(); gated && (!ok || g < next) {
		next, ok = g, true
	}
	if !ok {
		return 0, false, nil
	}
	wait := time.UnixMilli(next).Sub(e.now())
	return max(wait, 0), true, nil
}

// Wake implements relay.Queue: the channel is closed when an arm, a nack, a
// replay or a reap next puts an entry on the due heap.
func (e *Engine) Wake() <-chan struct{} { return e.wake.C() }

// held returns the entry of l if l's fencing token is still current.
func (e *Engine) held(l relay.Lease) (*entry, error) {
	ent := e.byID[l.ScheduleID]
	if ent == nil || ent.leasIdx < 0 || ent.token != l.Token {
		return nil, relay.ErrLeaseLost
	}
	return ent, nil
}

// Extend implements relay.Queue.
func (e *Engine) Extend(ctx context.Context, l relay.Lease, leaseFor time.Duration) (relay.Lease, error) {
	if leaseFor <= 0 {
		return relay.Lease{}, fmt.Errorf("memory: extend: lease duration %s is not positive", leaseFor)
	}
	if err := e.lock(ctx); err != nil {
		return relay.Lease{}, fmt.Errorf("memory: extend: %w", err)
	}
	defer e.mu.Unlock()
	ent, err := e.held(l)
	if err != nil {
		return relay.Lease{}, fmt.Errorf("memory: extend %s: %w", l.ScheduleID, err)
	}
	until := e.now().Add(leaseFor)
	ent.untilMs = ceilMs(until)
	e.leases.fix(ent)
	ent.shot.State = relay.StateLeased
	return relay.Lease{OneShot: ent.shot, Token: ent.token, Until: until}, nil
}

// Ack implements relay.Queue.
func (e *Engine) Ack(ctx context.Context, l relay.Lease) error {
	if err := e.lock(ctx); err != nil {
		return fmt.Errorf("memory: ack: %w", err)
	}
	defer e.mu.Unlock()
	ent, err := e.held(l)
	if err != nil {
		return fmt.Errorf("memory: ack %s: %w", l.ScheduleID, err)
	}
	e.agent(l.AgentID).answered()
	e.remove(ent)
	return nil
}

// Nack implements relay.Queue.
func (e *Engine) Nack(ctx context.Context, l relay.Lease, delay time.Duration, reason string) error {
	if err := e.lock(ctx); err != nil {
		return fmt.Errorf("memory: nack: %w", err)
	}
	defer e.mu.Unlock()
	ent, err := e.held(l)
	if err != nil {
		return fmt.Errorf("memory: nack %s: %w", l.ScheduleID, err)
	}
	e.requeue(ent, delay, reason)
	return nil
}

// requeue returns a leased entry to armed, due after delay.
func (e *Engine) requeue(ent *entry, delay time.Duration, reason string) {
	e.leases.remove(ent)
	e.endLease(ent)
	ent.token = 0
	ent.shot.State = relay.StateArmed
	ent.shot.DueAt = e.now().Add(max(delay, 0))
	ent.shot.LastError = reason
	ent.dueMs = ceilMs(ent.shot.DueAt)
	e.due.push(ent)
	e.signal()
}

// Kill implements relay.Queue.
func (e *Engine) Kill(ctx context.Context, l relay.Lease, reason string) error {
	if err := e.lock(ctx); err != nil {
		return fmt.Errorf("memory: kill: %w", err)
	}
	defer e.mu.Unlock()
	ent, err := e.held(l)
	if err != nil {
		return fmt.Errorf("memory: kill %s: %w", l.ScheduleID, err)
	}
	e.remove(ent)
	shot := ent.shot
	shot.State = relay.StateDead
	shot.LastError = reason
	dl := relay.DeadLetter{OneShot: shot, Reason: reason, FailedAt: e.now()}
	e.seq++
	d := &deadEntry{dl: dl, seq: e.seq}
	e.dead[shot.ScheduleID] = d
	e.deadList = append(e.deadList, d)
	k := key{shot.AgentID, shot.JobID}
	e.deadJobs[k] = append(e.deadJobs[k], shot.ScheduleID)
	// A fire that dies again after a replay moves to the end of the feed.
	feed := slices.DeleteFunc(e.failed[shot.AgentID], func(f failedRef) bool { return f.id == shot.ScheduleID })
	feed = append(feed, failedRef{id: shot.ScheduleID, at: dl.FailedAt})
	if over := len(feed) - relay.FailedFeedCap; over > 0 {
		feed = slices.Delete(feed, 0, over)
	}
	e.failed[shot.AgentID] = feed
	return nil
}

// Reap implements relay.Queue: expired leases go back to armed, due now,
// with the reason "lease expired".
func (e *Engine) Reap(ctx context.Context) (int, error) {
	if err := e.lock(ctx); err != nil {
		return 0, fmt.Errorf("memory: reap: %w", err)
	}
	defer e.mu.Unlock()
	now := e.now()
	nowMs := now.UnixMilli()
	n := 0
	for len(e.leases) > 0 && e.leases[0].untilMs <= nowMs {
		ent := e.leases[0]
		e.leases.remove(ent)
		e.endLease(ent)
		ent.token = 0
		ent.shot.State = relay.StateArmed
		ent.shot.DueAt = now
		ent.shot.LastError = "lease expired"
		ent.dueMs = nowMs
		e.due.push(ent)
		n++
	}
	// The safety net: every agent with held fires and room gets them back.
	if e.releaseAll() || n > 0 {
		e.signal()
	}
	return n, nil
}

// ListDead implements relay.DeadLetters. agentID "" lists every agent's; a
// cursor is bound to the filter it was issued for; limit <= 0 means 100.
func (e *Engine) ListDead(ctx context.Context, agentID, cursor string, limit int) ([]relay.DeadLetter, string, error) {
	var before uint64
	if cursor != "" {
		s, err := relay.DecodeCursor(relay.CursorDead, agentID, cursor)
		if err != nil {
			return nil, "", fmt.Errorf("memory: list dead: %w", err)
		}
		if _, err := fmt.Sscanf(s, "%d", &before); err != nil || before == 0 {
			return nil, "", fmt.Errorf("memory: list dead: %w", relay.ErrInvalidCursor)
		}
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	if err := e.lock(ctx); err != nil {
		return nil, "", fmt.Errorf("memory: list dead: %w", err)
	}
	defer e.mu.Unlock()
	i := len(e.deadList) - 1
	if cursor != "" {
		i, _ = slices.BinarySearchFunc(e.deadList, before, func(d *deadEntry, s uint64) int {
			switch {
			case d.seq < s:
				return -1
			case d.seq > s:
				return 1
			}
			return 0
		})
		i-- // the first entry older than the cursor
	}
	var items []relay.DeadLetter
	var last uint64
	for ; i >= 0; i-- {
		d := e.deadList[i]
		if agentID != "" && d.dl.AgentID != agentID {
			continue
		}
		if len(items) == limit {
			return items, relay.EncodeCursor(relay.CursorDead, agentID, fmt.Sprint(last)), nil
		}
		items = append(items, d.dl)
		last = d.seq
	}
	return items, "", nil
}

// Replay implements relay.DeadLetters: the check for unknown ids and the
// replay are one step under the lock.
func (e *Engine) Replay(ctx context.Context, scheduleIDs []string) (relay.ReplayResult, error) {
	if err := e.lock(ctx); err != nil {
		return relay.ReplayResult{}, fmt.Errorf("memory: replay: %w", err)
	}
	defer e.mu.Unlock()
	ids := relay.UniqueIDs(scheduleIDs)
	var unknown []string
	for _, id := range ids {
		if e.dead[id] == nil {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return relay.ReplayResult{}, fmt.Errorf("memory: replay: %w", &relay.UnknownDeadLettersError{ScheduleIDs: unknown})
	}
	return e.replayAll(ids), nil
}

// ReplayAgent implements relay.DeadLetters.
func (e *Engine) ReplayAgent(ctx context.Context, agentID string) (relay.ReplayResult, error) {
	if err := e.lock(ctx); err != nil {
		return relay.ReplayResult{}, fmt.Errorf("memory: replay agent: %w", err)
	}
	defer e.mu.Unlock()
	var ids []string
	for _, d := range e.deadList {
		if d.dl.AgentID == agentID {
			ids = append(ids, d.dl.ScheduleID)
		}
	}
	return e.replayAll(ids), nil
}

// replayAll replays the dead letters ids (each present) and wakes the
// dispatchers when it re-armed any; the caller holds the lock.
func (e *Engine) replayAll(ids []string) relay.ReplayResult {
	var res relay.ReplayResult
	for _, id := range ids {
		dl, rearmed, ok := e.replay(id)
		switch {
		case !ok:
			res.Missing = append(res.Missing, id)
		case rearmed:
			res.Replayed = append(res.Replayed, dl)
		default:
			res.Dropped = append(res.Dropped, relay.DroppedDeadLetter{DeadLetter: dl, Reason: relay.ReplayDropRearmed})
		}
	}
	if len(res.Replayed) > 0 {
		e.signal()
	}
	return res
}

// replay takes one dead letter out and re-arms it unless its job was armed
// again since; it returns the dead letter, whether it re-armed it, and
// whether there was one.
func (e *Engine) replay(id string) (relay.DeadLetter, bool, bool) {
	d := e.dead[id]
	if d == nil {
		return relay.DeadLetter{}, false, false
	}
	delete(e.dead, id)
	if i, ok := slices.BinarySearchFunc(e.deadList, d.seq, func(x *deadEntry, s uint64) int {
		switch {
		case x.seq < s:
			return -1
		case x.seq > s:
			return 1
		}
		return 0
	}); ok {
		e.deadList = slices.Delete(e.deadList, i, i+1)
	}
	k := key{d.dl.AgentID, d.dl.JobID}
	ids := slices.DeleteFunc(e.deadJobs[k], func(s string) bool { return s == id })
	if len(ids) == 0 {
		delete(e.deadJobs, k)
	} else {
		e.deadJobs[k] = ids
	}
	if d.superseded || e.rows[k] != nil || e.byID[id] != nil {
		return d.dl, false, true
	}
	now := e.now()
	shot := d.dl.OneShot
	shot.Attempt = 0
	shot.State = relay.StateArmed
	shot.DueAt = now
	e.seq++
	e.insert(&entry{shot: shot, dueMs: now.UnixMilli(), seq: e.seq, dueIdx: -1, leasIdx: -1})
	return d.dl, true, true
}

// SetInstanceState implements relay.Control.
func (e *Engine) SetInstanceState(ctx context.Context, instanceID string, state relay.InstanceState) error {
	if err := state.Check(); err != nil {
		return fmt.Errorf("memory: set instance state: %w", err)
	}
	if err := e.lock(ctx); err != nil {
		return fmt.Errorf("memory: set instance state: %w", err)
	}
	defer e.mu.Unlock()
	if state == relay.InstanceStopped {
		e.stopped[instanceID] = true
	} else {
		delete(e.stopped, instanceID)
	}
	return nil
}

// InstanceStopped implements relay.Control.
func (e *Engine) InstanceStopped(ctx context.Context, instanceID string) (bool, error) {
	if err := e.lock(ctx); err != nil {
		return false, fmt.Errorf("memory: instance stopped: %w", err)
	}
	defer e.mu.Unlock()
	return e.stopped[instanceID], nil
}

// FirstDelivery implements relay.Control. Records are forgotten once their
// ttl has passed.
func (e *Engine) FirstDelivery(ctx context.Context, deliveryID string, ttl time.Duration) (bool, error) {
	if err := e.lock(ctx); err != nil {
		return false, fmt.Errorf("memory: first delivery: %w", err)
	}
	defer e.mu.Unlock()
	now := e.now()
	nowMs := now.UnixMilli()
	for len(e.seenExp) > 0 && e.seenExp[0].at <= nowMs {
		x := e.seenExp.pop()
		if exp, ok := e.seen[x.id]; ok && exp <= nowMs {
			delete(e.seen, x.id)
		}
	}
	if _, ok := e.seen[deliveryID]; ok {
		return false, nil
	}
	exp := ceilMs(now.Add(ttl))
	e.seen[deliveryID] = exp
	e.seenExp.push(expiry{at: exp, id: deliveryID})
	return true, nil
}

// CancelAgent implements relay.Control.
func (e *Engine) CancelAgent(ctx context.Context, agentID string) (int, error) {
	if err := e.lock(ctx); err != nil {
		return 0, fmt.Errorf("memory: cancel agent: %w", err)
	}
	defer e.mu.Unlock()
	jobs := slices.Clone(e.jobs[agentID])
	for _, j := range jobs {
		e.remove(e.rows[key{agentID, j}])
	}
	return len(jobs), nil
}

// Stats implements relay.Engine.
func (e *Engine) Stats(ctx context.Context) (relay.Stats, error) {
	if err := e.lock(ctx); err != nil {
		return relay.Stats{}, fmt.Errorf("memory: stats: %w", err)
	}
	defer e.mu.Unlock()
	st := relay.Stats{
		Armed:      int64(len(e.rows)),
		Due:        int64(e.due.countDue(0, e.now().UnixMilli())),
		Leased:     int64(len(e.leases)),
		DeadLetter: int64(len(e.dead)),
	}
	for _, a := range e.agents {
		st.Held += int64(len(a.held))
		if a.probing {
			st.Probing++
		}
	}
	return st, nil
}

// Close implements relay.Engine: later calls fail with ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	return nil
}
