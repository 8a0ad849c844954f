package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// scriptAckMany removes delivered one-shots and their leases: the acks that
// concurrent callers made while the previous batch was in flight. An ack
// may carry its fire's last-fire record, written whether or not the lease
// still holds (the fire reached the agent either way).
//
// KEYS[1] lease, KEYS[2] the shard's last fire index, then for ack i:
// KEYS[1+2i] rows of its agent, KEYS[2+2i] last fires of its agent
// ARGV[1] now (unused), then for ack i the 7 values from ARGV[7i-5]:
// job, member, schedule id, token, the packed record (see lastfire.go; ""
// for none), its outcome ms and the row as the claim left it ("" when not
// known)
//
// A row that is still, byte for byte, the one the claim left is held by
// the lease without unpacking it; any other is fenced as usual. The leases
// go in one ZREM and the index entries in one ZADD.
//
// Returns {1 | 0 (lease lost), ...}, one per ack.
var scriptAckMany = script(`
local out, gone, index = {}, {}, {}
for i = 1, (#KEYS - 2) / 2 do
  local b = 7 * i - 5
  local job, m = ARGV[b], ARGV[b + 1]
  local rows = KEYS[1 + 2 * i]
  local v = redis.call('HGET', rows, job)
  local r = v and v == ARGV[b + 6]
  if not r then r = fenced(v, ARGV[b + 2], tonumber(ARGV[b + 3])) end
  if r then
    redis.call('HDEL', rows, job)
    gone[#gone + 1] = m
    out[i] = 1
  else
    out[i] = 0
  end
  if ARGV[b + 4] ~= '' then
    redis.call('HSET', KEYS[2 + 2 * i], job, ARGV[b + 4])
    index[#index + 1] = ARGV[b + 5]
    index[#index + 1] = m
  end
end
if #gone > 0 then chunked('ZREM', KEYS[1], gone, 1) end
if #index > 0 then chunked('ZADD', KEYS[2], index, 1) end
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
// failed-fire feed (at its end, also when it was there before a replay, and
// after every entry of the same millisecond).
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
-- The feed lists deaths in order: one in the same millisecond as the
-- newest entry goes just after it, not by its schedule id among equals.
local at = now
local top = redis.call('ZRANGE', KEYS[7], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) >= at then at = tonumber(top[2]) + 0.001 end
redis.call('ZADD', KEYS[7], at, sid)
redis.call('ZREMRANGEBYRANK', KEYS[7], 0, -tonumber(ARGV[8]) - 1)
return 1
`)

// ackItem is one ack of a batch, with its fire's last-fire record or nil.
type ackItem struct {
	l   relay.Lease
	rec *relay.LastFire
}

// Ack implements relay.Queue. Acks are group-committed (see groupCommit):
// a burst costs a few round trips, not one per fire.
func (e *Engine) Ack(ctx context.Context, l relay.Lease) error {
	return e.ack(ctx, ackItem{l: l})
}

var _ relay.AckRecorder = (*Engine)(nil)

// AckRecord implements relay.AckRecorder: the record goes out in the ack's
// script call, group-committed with other acks.
func (e *Engine) AckRecord(ctx context.Context, l relay.Lease, f relay.LastFire) error {
	if err := checkLastFire(f); err != nil {
		return fmt.Errorf("redis: ack: %w", err)
	}
	return e.ack(ctx, ackItem{l: l, rec: &f})
}

// ack queues one ack on the engine's group commit and waits for its batch.
func (e *Engine) ack(ctx context.Context, a ackItem) error {
	err := submit(ctx, &e.acker, a, e.groupTimeout(), e.ackMany)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("redis: ack: %w", err)
	}
	return err
}

// groupTimeout bounds one group-committed batch, retries included.
func (e *Engine) groupTimeout() time.Duration {
	return max(e.opts.RetryFor, 0) + 10*time.Second
}

// ackMany runs one batch of acks, one script call per shard, all in one
// pipeline, and answers each caller.
func (e *Engine) ackMany(ctx context.Context, batch []*groupReq[ackItem]) {
	shards, parts := byShard(batch, func(a ackItem) int { return e.k.shardOf(a.l.AgentID) })
	calls := make([]scriptCall, len(shards))
	for i, s := range shards {
		calls[i] = e.ackCall(s, parts[i])
	}
	e.runEach(ctx, scriptAckMany, calls, func(i int, res any, err error) {
		part := parts[i]
		var acks []any
		if err == nil {
			acks, err = array(res)
			if err == nil && len(acks) != len(part) {
				err = fmt.Errorf("%w: %d results for %d acks", errReply, len(acks), len(part))
			}
		}
		for j, r := range part {
			if err != nil {
				r.done <- fmt.Errorf("redis: ack: %w", err)
				continue
			}
			r.done <- fencedResult("ack", r.v.l, acks[j], nil)
		}
	})
}

// ackCall is the scriptAckMany call of shard s's acks.
func (e *Engine) ackCall(s int, part []*groupReq[ackItem]) scriptCall {
	keys := make([]string, 2, 2+2*len(part))
	keys[0], keys[1] = e.k.lease(s), e.k.lastFireIndex(s)
	args := make([]any, 1, 1+7*len(part))
	args[0] = e.nowArg()
	var packed []byte // the records and rows, back to back
	for _, r := range part {
		l, f := r.v.l, r.v.rec
		keys = append(keys, e.k.rows(s, l.AgentID), e.k.lastFires(s, l.AgentID))
		args = append(args, l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token)
		if f == nil {
			args = append(args, "", 0)
		} else {
			from := len(packed)
			packed = packLastFire(packed, *f)
			args = append(args, packed[from:len(packed):len(packed)], f.At.UnixMilli())
		}
		from := len(packed)
		packed = packLeasedRow(packed, l)
		args = append(args, packed[from:len(packed):len(packed)])
	}
	return scriptCall{keys: keys, args: args}
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
