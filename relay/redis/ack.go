package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// ackBatch bounds the acks of one script call.
const ackBatch = 256

// scriptAckMany removes delivered one-shots and their leases: the acks that
// concurrent callers made while the previous batch was in flight.
//
// KEYS[1] lease, KEYS[1+i] rows of the agent of ack i
// ARGV[1] now (unused), then for ack i: ARGV[4i-2] job, ARGV[4i-1] member,
// ARGV[4i] schedule id, ARGV[4i+1] token
//
// Returns {1 | 0 (lease lost), ...}, one per ack.
var scriptAckMany = script(`
local out = {}
for i = 1, #KEYS - 1 do
  local b = 4 * i - 2
  local job, m = ARGV[b], ARGV[b + 1]
  local r = fenced(redis.call('HGET', KEYS[1 + i], job), ARGV[b + 2], tonumber(ARGV[b + 3]))
  if r then
    redis.call('HDEL', KEYS[1 + i], job)
    redis.call('ZREM', KEYS[1], m)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// scriptNack returns a leased one-shot to armed, due after a delay.
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease
// ARGV[1] now, ARGV[2] job, ARGV[3] member, ARGV[4] schedule id, ARGV[5] token,
// ARGV[6] delay ms, ARGV[7] reason, ARGV[8] wake channel
//
// Returns 1, 2 when the one-shot became the earliest of its shard (announced
// on the wake channel: a dispatcher may be waiting for a later time), or 0
// when the lease is lost.
var scriptNack = script(`
local r = fenced(redis.call('HGET', KEYS[1], ARGV[2]), ARGV[4], tonumber(ARGV[5]))
if not r then return 0 end
-- Rounded up: a retry is never due before the full delay has passed.
local due = clockUp(ARGV[1]) + tonumber(ARGV[6])
r[7] = 0
r[8] = due - r[3]
r[10] = ARGV[7]
redis.call('HSET', KEYS[1], ARGV[2], cmsgpack.pack(r))
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[2], due, ARGV[3])
local first = redis.call('ZRANGE', KEYS[2], 0, 0)
if first[1] == ARGV[3] then
  redis.call('PUBLISH', ARGV[8], due)
  return 2
end
return 1
`)

// scriptKill moves a leased one-shot to the dead letter and the agent's
// failed-fire feed (at its end, also when it was there before a replay).
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease, KEYS[4] dead,
// KEYS[5] dead by time, KEYS[6] dead of the agent, KEYS[7] failed feed of the agent
// ARGV[1] now, ARGV[2] job, ARGV[3] member, ARGV[4] schedule id, ARGV[5] token,
// ARGV[6] reason, ARGV[7] agent, ARGV[8] feed length cap
//
// Returns 1, or 0 when the lease is lost.
var scriptKill = script(`
local now = clock(ARGV[1])
local sid = ARGV[4]
local r = fenced(redis.call('HGET', KEYS[1], ARGV[2]), sid, tonumber(ARGV[5]))
if not r then return 0 end
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[3])
local d = {ARGV[7], ARGV[2], r[1], r[2], r[3], r[4], r[5], r[6], 0, r[8], r[9], ARGV[6], ARGV[6], now, r[11]}
redis.call('HSET', KEYS[4], sid, cmsgpack.pack(d))
redis.call('ZADD', KEYS[5], now, sid)
redis.call('ZADD', KEYS[6], now, sid)
redis.call('ZADD', KEYS[7], now, sid)
redis.call('ZREMRANGEBYRANK', KEYS[7], 0, -tonumber(ARGV[8]) - 1)
return 1
`)

// Ack implements relay.Queue. Acks of one shard are group-committed: while
// one script call is in flight, the acks that arrive queue up and go out
// together in the next call, so a burst costs a few round trips, not one per
// fire, and a lone ack waits for nobody.
func (e *Engine) Ack(ctx context.Context, l relay.Lease) error {
	s := e.k.shardOf(l.AgentID)
	a := &e.ackers[s]
	req := &ackReq{l: l, done: make(chan error, 1)}
	a.mu.Lock()
	a.pending = append(a.pending, req)
	if a.busy {
		a.mu.Unlock()
		select {
		case err := <-req.done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("redis: ack: %w", ctx.Err())
		}
	}
	a.busy = true
	a.mu.Unlock()
	e.flushAcks(ctx, s)
	return <-req.done
}

// ackReq is one Ack waiting for its batch.
type ackReq struct {
	l    relay.Lease
	done chan error
}

// acker queues the acks of one shard.
type acker struct {
	mu      sync.Mutex
	pending []*ackReq
	busy    bool // a flush is running
}

// flushAcks sends the caller's batch of queued acks of shard s (the caller
// has set busy), then, when more queued meanwhile, hands them to drainAcks
// in a goroutine, so no caller waits for others' acks.
func (e *Engine) flushAcks(ctx context.Context, s int) {
	a := &e.ackers[s]
	ctx, cancel := e.ackContext(ctx)
	defer cancel()
	batch := a.take()
	if batch == nil {
		return
	}
	e.ackMany(ctx, s, batch)
	a.mu.Lock()
	more := len(a.pending) > 0
	if !more {
		a.busy = false
	}
	a.mu.Unlock()
	if more {
		go e.drainAcks(ctx, s) // keeps ctx's values, not its end
	}
}

// drainAcks sends queued acks of shard s until none is left, then clears
// busy.
func (e *Engine) drainAcks(ctx context.Context, s int) {
	a := &e.ackers[s]
	ctx, cancel := e.ackContext(ctx)
	defer cancel()
	for batch := a.take(); batch != nil; batch = a.take() {
		e.ackMany(ctx, s, batch)
	}
}

// ackContext is the context of one flush: other callers' acks ride on it, so
// it keeps ctx's values but not its cancellation, and is bounded by
// ackTimeout.
func (e *Engine) ackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.ackTimeout())
}

// take removes up to ackBatch queued acks; when none is queued it clears
// busy and returns nil.
func (a *acker) take() []*ackReq {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) == 0 {
		a.busy = false
		return nil
	}
	n := min(len(a.pending), ackBatch)
	batch := a.pending[:n:n]
	a.pending = a.pending[n:]
	if len(a.pending) == 0 {
		a.pending = nil
	}
	return batch
}

// ackTimeout bounds one batch of acks, retries included.
func (e *Engine) ackTimeout() time.Duration {
	return max(e.opts.RetryFor, 0) + 10*time.Second
}

// ackMany runs one batch of acks and answers each caller.
func (e *Engine) ackMany(ctx context.Context, s int, batch []*ackReq) {
	keys := make([]string, 1, 1+len(batch))
	keys[0] = e.k.lease(s)
	args := make([]any, 1, 1+4*len(batch))
	args[0] = e.nowArg()
	for _, r := range batch {
		keys = append(keys, e.k.rows(s, r.l.AgentID))
		args = append(args, r.l.JobID, member(r.l.AgentID, r.l.JobID), r.l.ScheduleID, r.l.Token)
	}
	v, err := e.run(ctx, scriptAckMany, keys, args...)
	var res []any
	if err == nil {
		res, err = array(v)
		if err == nil && len(res) != len(batch) {
			err = fmt.Errorf("%w: %d results for %d acks", errReply, len(res), len(batch))
		}
	}
	for i, r := range batch {
		if err != nil {
			r.done <- fmt.Errorf("redis: ack: %w", err)
			continue
		}
		r.done <- fencedResult("ack", r.l, res[i], nil)
	}
}

// Nack implements relay.Queue. A one-shot that becomes the earliest of its
// shard is announced on the wake channel, so that every dispatcher, in any
// process, waiting for a later time learns of it: a retry comes at its step
// of the ladder, not at a dispatcher's next recheck.
func (e *Engine) Nack(ctx context.Context, l relay.Lease, delay time.Duration, reason string) error {
	s := e.k.shardOf(l.AgentID)
	v, err := e.run(ctx, scriptNack, []string{e.k.rows(s, l.AgentID), e.k.due(s), e.k.lease(s)},
		e.nowArg(), l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token, durMs(max(delay, 0)), reason, e.k.wake())
	if err := fencedResult("nack", l, v, err); err != nil {
		return err
	}
	if n, _ := integer(v); n == 2 {
		e.notify() // this process's dispatchers need not wait for the echo
	}
	return nil
}

// Kill implements relay.Queue.
func (e *Engine) Kill(ctx context.Context, l relay.Lease, reason string) error {
	s := e.k.shardOf(l.AgentID)
	v, err := e.run(ctx, scriptKill,
		[]string{e.k.rows(s, l.AgentID), e.k.due(s), e.k.lease(s), e.k.dead(s),
			e.k.deadByTime(s), e.k.deadOfAgent(s, l.AgentID), e.k.failed(s, l.AgentID)},
		e.nowArg(), l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token, reason, l.AgentID, relay.FailedFeedCap)
	return fencedResult("kill", l, v, err)
}

// fencedResult maps the 1/0 reply of a fenced script.
func fencedResult(op string, l relay.Lease, v any, err error) error {
	if err != nil {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	n, err := integer(v)
	if err != nil {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	if n == 0 {
		return fmt.Errorf("redis: %s %s: %w", op, l.ScheduleID, relay.ErrLeaseLost)
	}
	return nil
}
