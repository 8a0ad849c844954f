package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// scriptAckMany removes delivered one-shots and their leases: the acks that
// concurrent callers made while the previous batch was in flight. An ack
// may carry its fire's last-fire record, written whether or not the lease
// still holds (the fire reached the agent either way).
//
// KEYS[1] lease, KEYS[2] the shard's last fire index, KEYS[3] ready
// agents, KEYS[4] held agents, KEYS[5] gated agents, KEYS[6] probing
// agents, KEYS[7] in-flight counts, then for agent j: KEYS[4+4j] rows,
// KEYS[5+4j] last fires, KEYS[6+4j] flow record, KEYS[7+4j] held
// ARGV[1] now, ARGV[2] wake channel, ARGV[3] agent count na, ARGV[3+j]
// agent j, then for each ack the 8 values from ARGV[4+na+8i]: its agent j,
// job, member, schedule id, token, the packed record (see lastfire.go; ""
// for none), its outcome ms and the row as the claim left it ("" when not
// known)
//
// A row that is still, byte for byte, the one the claim left is held by
// the lease without unpacking it; any other is fenced as usual. The leases
// go in one ZREM and the index entries in one ZADD, and the agents' counts
// of leases in flight drop (one HMGET and one HSET for them all). Then,
// per agent: one that was probing stops
// (answering again: its failures and its Down hold go too), and one with
// held fires is made ready (nudge(): the lease that ended gave it room, as
// a rule, and the claim that meets it checks; both cost a look only in a
// shard where some agent probes or holds fires): the next claim leases
// them from its held zset.
//
// Returns {1 | 0 (lease lost), ..., released}: one per ack, then how many
// agents with held fires were made ready (announced on the wake channel).
var scriptAckMany = script(`
local na = tonumber(ARGV[3])
local out, gone, index, acked = {}, {}, {}, {}
local i = 0
for b = 4 + na, #ARGV, 8 do
  i = i + 1
  local j = tonumber(ARGV[b])
  local job, m = ARGV[b + 1], ARGV[b + 2]
  local k = 4 * j + 3
  local v = redis.call('HGET', KEYS[k + 1], job)
  local r = v and v == ARGV[b + 7]
  if not r then r = fenced(v, ARGV[b + 3], tonumber(ARGV[b + 4])) end
  if r then
    redis.call('HDEL', KEYS[k + 1], job)
    gone[#gone + 1] = m
    local a = acked[j]
    if not a then
      a = {}
      acked[j] = a
    end
    a[#a + 1] = job
    out[i] = 1
  else
    out[i] = 0
  end
  if ARGV[b + 5] ~= '' then
    redis.call('HSET', KEYS[k + 2], job, ARGV[b + 5])
    index[#index + 1] = ARGV[b + 6]
    index[#index + 1] = m
  end
end
if #gone > 0 then chunked('ZREM', KEYS[1], gone, 1) end
if #index > 0 then chunked('ZADD', KEYS[2], index, 1) end
local rel = 0
if #gone > 0 then
  -- Which of the acked agents hold fires: one SMISMEMBER for them all.
  local names, by = {}, {}
  for j = 1, na do
    if acked[j] then
      names[#names + 1] = ARGV[3 + j]
      by[#by + 1] = -#acked[j]
    end
  end
  bump(KEYS[7], names, by)
  local holds = inSet(KEYS[4], names)
  local anyProbe = redis.call('SCARD', KEYS[6]) > 0
  local b = sets(KEYS[3], KEYS[4], KEYS[5])
  for j = 1, na do
    local jobs = acked[j]
    if jobs then
      local k, agent = 4 * j + 3, ARGV[3 + j]
      if anyProbe and redis.call('SREM', KEYS[6], agent) == 1 then
        redis.call('HDEL', KEYS[k + 3], 'probe', 'fails', 'gate')
        -- Its Down hold is over (a rate slot release() finds puts it back).
        push(b.ungate, agent)
      end
      if holds[agent] then rel = rel + nudge(agent, KEYS[k + 4], b) end
    end
  end
  flush(b)
end
if rel > 0 then redis.call('PUBLISH', ARGV[2], clock(ARGV[1])) end
out[i + 1] = rel
return out
`)

// scriptNack returns a leased one-shot to armed, due after a delay; as
// Down, it also starts (or keeps) the agent's probe and holds its fires.
// The lease ends, so the agent's held fires get the room it frees.
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease, KEYS[4] flow
// record, KEYS[5] in-flight counts, KEYS[6] held, KEYS[7] held agents,
// KEYS[8] gated agents, KEYS[9] probing agents, KEYS[10] ready agents
// ARGV[1] now, ARGV[2] job, ARGV[3] member, ARGV[4] schedule id, ARGV[5] token,
// ARGV[6] delay ms, ARGV[7] reason, ARGV[8] wake channel, ARGV[9] agent,
// ARGV[10] hold ms ("" for a nack), ARGV[11] the agent's failures
//
// Returns 1, 2 when the one-shot became the earliest of its shard or held
// fires may go out (announced on the wake channel: a dispatcher may be
// waiting for a later time), or 0 when the lease is lost.
var scriptNack = script(`
local r = fenced(redis.call('HGET', KEYS[1], ARGV[2]), ARGV[4], tonumber(ARGV[5]))
if not r then return 0 end
-- Rounded up: a retry is never due before the full delay has passed.
local at = clockUp(ARGV[1]) + tonumber(ARGV[6])
local now = clock(ARGV[1])
local agent, job, m = ARGV[9], ARGV[2], ARGV[3]
r[7] = 0
r[8] = at - r[3]
r[10] = ARGV[7]
redis.call('HSET', KEYS[1], job, cmsgpack.pack(r))
ended(KEYS[5], agent, redis.call('ZREM', KEYS[3], m))
redis.call('ZADD', KEYS[2], at, m)
if ARGV[10] ~= '' then
  local f = redis.call('HMGET', KEYS[4], 'gate', 'fails')
  local gate = math.max(tonumber(f[1]) or 0, now + tonumber(ARGV[10]))
  local fails = math.max(tonumber(f[2]) or 0, tonumber(ARGV[11]))
  redis.call('HSET', KEYS[4], 'probe', '1', 'gate', gate, 'fails', fails)
  redis.call('SADD', KEYS[9], agent)
  redis.call('ZADD', KEYS[8], gate, agent)
end
local b = sets(KEYS[10], KEYS[7], KEYS[8])
local rel = release(now, agent, KEYS[4], KEYS[5], KEYS[6], b)
flush(b)
local first = redis.call('ZRANGE', KEYS[2], 0, 0)
if first[1] == m or rel > 0 then
  redis.call('PUBLISH', ARGV[8], at)
  return 2
end
return 1
`)

// scriptKill moves a leased one-shot to the dead letter and the agent's
// failed-fire feed (at its end, also when it was there before a replay, and
// after every entry of the same millisecond). The lease ends, so the
// agent's held fires get the room it frees.
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease, KEYS[4] dead,
// KEYS[5] dead by time, KEYS[6] dead of the agent, KEYS[7] failed feed of
// the agent, KEYS[8] flow record, KEYS[9] in-flight counts, KEYS[10] held,
// KEYS[11] held agents, KEYS[12] gated agents, KEYS[13] ready agents
// ARGV[1] now, ARGV[2] job, ARGV[3] member, ARGV[4] schedule id, ARGV[5] token,
// ARGV[6] reason, ARGV[7] agent, ARGV[8] feed length cap, ARGV[9] wake channel
//
// Returns 1, 2 when held fires may go out (announced on the wake channel),
// or 0 when the lease is lost.
var scriptKill = script(`
local now = clock(ARGV[1])
local sid = ARGV[4]
local r = fenced(redis.call('HGET', KEYS[1], ARGV[2]), sid, tonumber(ARGV[5]))
if not r then return 0 end
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[3])
ended(KEYS[9], ARGV[7], redis.call('ZREM', KEYS[3], ARGV[3]))
local d = {ARGV[7], ARGV[2], r[1], r[2], r[3], r[4], r[5], r[6], 0, r[8], r[9], ARGV[6], ARGV[6], now, r[11], r[12], r[13], r[14], r[15]}
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
local b = sets(KEYS[13], KEYS[11], KEYS[12])
local rel = release(now, ARGV[7], KEYS[8], KEYS[9], KEYS[10], b)
flush(b)
if rel > 0 then
  redis.call('PUBLISH', ARGV[9], now)
  return 2
end
return 1
`)

// ackItem is one ack of a batch, with its fire's last-fire record or nil.
type ackItem struct {
	l   relay.Lease
	rec *relay.LastFire
}

// Ack implements relay.Queue. Acks are group-committed (see groupCommit)
// in one queue per master (queueOf): a burst costs a few round trips, not
// one per fire, and the acks of a master that is down (retried until
// Options.RetryFor) never hold up those of another.
func (e *queue) Ack(ctx context.Context, l relay.Lease) error {
	return e.ack(ctx, ackItem{l: l})
}

var _ relay.AckRecorder = (*Engine)(nil)

// AckRecord implements relay.AckRecorder: the record goes out in the ack's
// script call, group-committed with other acks.
func (e *queue) AckRecord(ctx context.Context, l relay.Lease, f relay.LastFire) error {
	if err := checkLastFire(f); err != nil {
		return fmt.Errorf("redis: ack: %w", err)
	}
	return e.ack(ctx, ackItem{l: l, rec: &f})
}

// ack queues one ack on its group commit (see queueOf) and waits for its
// batch.
func (e *queue) ack(ctx context.Context, a ackItem) error {
	err := submit(ctx, e.acker.get(e.queueOf(ctx, a.l.AgentID)), a, e.groupTimeout(), e.ackMany)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("redis: ack: %w", err)
	}
	return err
}

// groupTimeout bounds one group-committed batch, retries included.
func (e *core) groupTimeout() time.Duration {
	return max(e.opts.RetryFor, 0) + 10*time.Second
}

// ackMany runs one batch of acks, one script call per shard, all in one
// pipeline, and answers each caller.
func (e *queue) ackMany(ctx context.Context, batch []*groupReq[ackItem]) {
	shards, parts := byShard(batch, func(a ackItem) int { return e.k.shardOf(a.l.AgentID) })
	calls := make([]scriptCall, len(shards))
	for i, s := range shards {
		calls[i] = e.ackCall(s, parts[i])
	}
	released := false
	run := e.runEach
	if e.opts.MinReplicas > 0 {
		run = e.runEachWrite
	}
	run(ctx, scriptAckMany, calls, func(i int, res any, err error) {
		part := parts[i]
		var acks []any
		if err == nil {
			acks, err = array(res)
			if err == nil && len(acks) != len(part)+1 {
				err = fmt.Errorf("%w: %d results for %d acks", errReply, len(acks), len(part))
			}
		}
		if err == nil {
			n, _ := integer(acks[len(part)])
			released = released || n > 0
		}
		for j, r := range part {
			if err != nil {
				r.done <- fmt.Errorf("redis: ack: %w", err)
				continue
			}
			r.done <- fencedResult("ack", r.v.l, acks[j], nil)
		}
	})
	if released {
		e.notify() // this process's dispatchers need not wait for the echo
	}
}

// ackCall is the scriptAckMany call of shard s's acks.
func (e *queue) ackCall(s int, part []*groupReq[ackItem]) scriptCall {
	agentOf := make(map[string]int, 4) // agent → its index j, from 1
	var agents []string
	for _, r := range part {
		if a := r.v.l.AgentID; agentOf[a] == 0 {
			agents = append(agents, a)
			agentOf[a] = len(agents)
		}
	}
	keys := make([]string, 7, 7+4*len(agents))
	keys[0], keys[1], keys[2] = e.k.lease(s), e.k.lastFireIndex(s), e.k.ready(s)
	keys[3], keys[4], keys[5], keys[6] = e.k.held(s), e.k.gated(s), e.k.probing(s), e.k.inFlight(s)
	args := make([]any, 3, 3+len(agents)+8*len(part))
	args[0], args[1], args[2] = e.nowArg(), e.k.wake(), len(agents)
	for _, a := range agents {
		keys = append(keys, e.k.rows(s, a), e.k.lastFires(s, a), e.k.agent(s, a), e.k.heldOf(s, a))
		args = append(args, a)
	}
	var packed []byte // the records and rows, back to back
	for _, r := range part {
		l, f := r.v.l, r.v.rec
		args = append(args, agentOf[l.AgentID], l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token)
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
func (e *queue) Nack(ctx context.Context, l relay.Lease, delay time.Duration, reason string) error {
	return e.nack(ctx, "nack", l, delay, reason, "")
}

// Down implements relay.Queue: Nack, and one script also starts the
// agent's probe, holds its fires until hold has passed and counts its
// failure.
func (e *queue) Down(ctx context.Context, l relay.Lease, delay, hold time.Duration, reason string) error {
	return e.nack(ctx, "down", l, delay, reason, strconv.FormatInt(durMs(max(hold, 0)), 10))
}

// nack runs scriptNack for Nack (hold "") or Down (hold in ms).
func (e *queue) nack(ctx context.Context, op string, l relay.Lease, delay time.Duration, reason, hold string) error {
	s := e.k.shardOf(l.AgentID)
	fk := e.k.flowKeys(s, l.AgentID)
	v, err := e.runWrite(ctx, scriptNack,
		[]string{e.k.rows(s, l.AgentID), e.k.due(s), e.k.lease(s), fk[0], fk[1], fk[2], e.k.held(s), e.k.gated(s), e.k.probing(s), e.k.ready(s)},
		e.nowArg(), l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token, durMs(max(delay, 0)), reason, e.k.wake(),
		l.AgentID, hold, max(l.AgentFailures, 0)+1)
	if err := fencedResult(op, l, v, err); err != nil {
		return err
	}
	if n, _ := integer(v); n == 2 {
		e.notify() // this process's dispatchers need not wait for the echo
	}
	return nil
}

// Kill implements relay.Queue.
func (e *queue) Kill(ctx context.Context, l relay.Lease, reason string) error {
	s := e.k.shardOf(l.AgentID)
	fk := e.k.flowKeys(s, l.AgentID)
	v, err := e.runWrite(ctx, scriptKill,
		[]string{e.k.rows(s, l.AgentID), e.k.due(s), e.k.lease(s), e.k.dead(s),
			e.k.deadByTime(s), e.k.deadOfAgent(s, l.AgentID), e.k.failed(s, l.AgentID),
			fk[0], fk[1], fk[2], e.k.held(s), e.k.gated(s), e.k.ready(s)},
		e.nowArg(), l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token, reason, l.AgentID, relay.FailedFeedCap, e.k.wake())
	if err := fencedResult("kill", l, v, err); err != nil {
		return err
	}
	if n, _ := integer(v); n == 2 {
		e.notify()
	}
	return nil
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
