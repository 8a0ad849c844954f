package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// reapBatch is how many expired leases one reap step handles.
const reapBatch = 256

// scriptPeekReap lists expired leases, and the agents with held fires,
// without changing anything; the reap that follows re-checks each lease.
//
// KEYS[1] lease, KEYS[2] held agents
// ARGV[1] now, ARGV[2] count
//
// Returns {{member...} (up to count, in score order), {agent...}}.
var scriptPeekReap = script(`
local now = clock(ARGV[1])
return {redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[2])),
  redis.call('SMEMBERS', KEYS[2])}
`)

// scriptHead reads the earliest due time of a shard and Redis's clock: the
// earliest due entry, the earliest gate of an agent with held fires, or the
// earliest held fire of a ready agent (due now: it has room).
//
// KEYS[1] due, KEYS[2] gated, KEYS[3] ready
// ARGV[1] now (unused)
//
// Returns {earliest due ms or -1, Redis time s, Redis time µs}.
var scriptHead = script(`
local t = redis.call('TIME')
local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local s = -1
if h[2] then s = tonumber(h[2]) end
local g = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if g[2] and (s < 0 or tonumber(g[2]) < s) then s = tonumber(g[2]) end
local r = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if r[2] and (s < 0 or tonumber(r[2]) < s) then s = tonumber(r[2]) end
-- Whole milliseconds, rounded up: a due entry scores a little under
-- its due ms (see scriptArm).
return {math.ceil(s), tonumber(t[1]), tonumber(t[2])}
`)

// scriptExtend renews a lease.
//
// KEYS[1] rows of the agent, KEYS[2] lease
// ARGV[1] now, ARGV[2] job, ARGV[3] member, ARGV[4] schedule id,
// ARGV[5] token, ARGV[6] lease ms
//
// Returns {lease until ms, row...}, or an empty array when the lease is lost.
var scriptExtend = script(`
local now = clock(ARGV[1])
local r = fenced(redis.call('HGET', KEYS[1], ARGV[2]), ARGV[4], tonumber(ARGV[5]))
if not r then return {} end
local untilms = now + tonumber(ARGV[6])
redis.call('ZADD', KEYS[2], untilms, ARGV[3])
return {untilms, unpack(r)}
`)

// scriptReap returns the candidates whose lease has expired to armed, due
// now, and releases their agents' held fires (release(): an agent with
// room is made ready).
//
// KEYS[1] lease, KEYS[2] due, KEYS[3] held agents, KEYS[4] gated agents,
// KEYS[5] ready agents, then for agent j: KEYS[2+4j] rows, KEYS[3+4j] flow
// record, KEYS[4+4j] in-flight counts (the shard's), KEYS[5+4j] held
// ARGV[1] now, ARGV[2] wake channel, ARGV[3] agent count na, ARGV[3+j]
// agent j, ARGV[4+na...] candidate members
//
// Returns {returned, held fires that may go out}; when any, they are
// announced on the wake channel (they are due now).
var scriptReap = script(`
local now = clock(ARGV[1])
local na = tonumber(ARGV[3])
local byId, touched, inf = {}, {}, nil
for j = 1, na do byId[ARGV[3 + j]] = j end
local n, rel = 0, 0
for i = 4 + na, #ARGV do
  local m = ARGV[i]
  local s = redis.call('ZSCORE', KEYS[1], m)
  if s and tonumber(s) < now then
    redis.call('ZREM', KEYS[1], m)
    local agent, job = split(m)
    local j = byId[agent]
    local b = 1 + 4 * j
    inf = KEYS[b + 3]
    touched[j] = (touched[j] or 0) + 1
    local v = redis.call('HGET', KEYS[b + 1], job)
    if v then
      local r = cmsgpack.unpack(v)
      r[7] = 0
      r[8] = now - r[3]
      redis.call('HSET', KEYS[b + 1], job, cmsgpack.pack(r))
      redis.call('ZADD', KEYS[2], now, m)
      n = n + 1
    end
  end
end
if inf then
  local names, by = {}, {}
  for j = 1, na do
    if touched[j] then
      names[#names + 1] = ARGV[3 + j]
      by[#by + 1] = -touched[j]
    end
  end
  bump(inf, names, by)
end
local st = sets(KEYS[5], KEYS[3], KEYS[4])
for j = 1, na do
  if touched[j] then
    local b = 1 + 4 * j
    rel = rel + release(now, ARGV[3 + j], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], st)
  end
end
flush(st)
if n + rel > 0 then redis.call('PUBLISH', ARGV[2], now) end
return {n, rel}
`)

// scriptRecount sets the shard's in-flight counts to what its lease zset
// holds, agent by agent: the safety net under the scripts that keep them
// in step (one that took or ended a lease without counting it could
// otherwise hold an agent's fires back, or let too many out, for good).
// A lease counts until it ends, also once it expired: Reap ends those.
//
// KEYS[1] lease, KEYS[2] in-flight counts
// ARGV[1] now (unused)
//
// Returns how many agents' counts it corrected.
var scriptRecount = script(`
local want, order = {}, {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local agent = split(m)
  if not want[agent] then
    want[agent] = 0
    order[#order + 1] = agent
  end
  want[agent] = want[agent] + 1
end
local cur = redis.call('HGETALL', KEYS[2])
local have = {}
local fixed, del = 0, {}
for i = 1, #cur, 2 do
  local a, n = cur[i], tonumber(cur[i + 1])
  have[a] = n
  if not want[a] then
    del[#del + 1] = a
  end
end
local set = {}
for _, a in ipairs(order) do
  if have[a] ~= want[a] then
    set[#set + 1] = a
    set[#set + 1] = want[a]
  end
end
if #del > 0 then chunked('HDEL', KEYS[2], del, 1) end
if #set > 0 then chunked('HSET', KEYS[2], set, 1) end
return #del + #set / 2
`)

// recountEvery is how often Reap recounts a shard's in-flight leases.
const recountEvery = 30 * time.Second

// downRecheck is how soon a dispatcher looks again at a shard whose master
// did not answer.
const downRecheck = 500 * time.Millisecond

// NextDue implements relay.Queue: the earliest due entry, gate of an agent
// with held fires or held fire of a ready agent over all shards (read in one pipeline), judged by
// Redis's clock. A shard whose master does not answer counts as due within
// downRecheck.
func (e *queue) NextDue(ctx context.Context) (time.Duration, bool, error) {
	now := e.nowArg()
	replies, down, err := e.peekShards(ctx, scriptHead,
		func(s int) []string { return []string{e.k.due(s), e.k.gated(s), e.k.ready(s)} },
		func(int) []any { return []any{now} })
	if err != nil {
		return 0, false, fmt.Errorf("redis: next due: %w", err)
	}
	best := int64(-1)
	var redisNow time.Time
	someDown := false
	for s, v := range replies {
		if down[s] != nil {
			someDown = true
			continue
		}
		a, err := array(v)
		if err != nil || len(a) != 3 {
			return 0, false, fmt.Errorf("redis: next due: %w", errReply)
		}
		score, err1 := integer(a[0])
		sec, err2 := integer(a[1])
		usec, err3 := integer(a[2])
		if err1 != nil || err2 != nil || err3 != nil {
			return 0, false, fmt.Errorf("redis: next due: %w", errReply)
		}
		redisNow = time.Unix(sec, usec*1000)
		if score >= 0 && (best < 0 || score < best) {
			best = score
		}
	}
	if someDown {
		// A shard whose master is down may hold fires due meanwhile: come
		// back soon, to claim them once it answers (or its replica does).
		redisNow = cmp.Or(redisNow, time.Now())
		if soon := redisNow.Add(downRecheck).UnixMilli(); best < 0 || best > soon {
			best = soon
		}
	}
	if best < 0 {
		return 0, false, nil
	}
	if e.opts.Now != nil {
		redisNow = e.opts.Now()
	}
	return max(ms(best).Sub(redisNow), 0), true, nil
}

// Extend implements relay.Queue.
func (e *queue) Extend(ctx context.Context, l relay.Lease, leaseFor time.Duration) (relay.Lease, error) {
	s := e.k.shardOf(l.AgentID)
	v, err := e.run(ctx, scriptExtend, []string{e.k.rows(s, l.AgentID), e.k.lease(s)},
		e.nowArg(), l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token, durMs(leaseFor))
	if err != nil {
		return relay.Lease{}, fmt.Errorf("redis: extend: %w", err)
	}
	f, err := array(v)
	if err != nil {
		return relay.Lease{}, fmt.Errorf("redis: extend: %w", err)
	}
	if len(f) == 0 {
		return relay.Lease{}, fmt.Errorf("redis: extend %s: %w", l.ScheduleID, relay.ErrLeaseLost)
	}
	out, err := decodeLeaseFields(l.AgentID, l.JobID, f[0], f[1:])
	if err != nil {
		return relay.Lease{}, fmt.Errorf("redis: extend: %w", err)
	}
	return out, nil
}

// Reap implements relay.Queue: expired leases (by Redis's clock) go back to
// armed, due now, announced on the wake channel. Then, as a safety net,
// every agent with held fires whose room allows is made ready (see
// releaseHeld).
func (e *queue) Reap(ctx context.Context) (int, error) {
	total, released := 0, 0
	now := e.nowArg()
	heads, down, err := e.peekShards(ctx, scriptPeekReap,
		func(s int) []string { return []string{e.k.lease(s), e.k.held(s)} },
		func(int) []any { return []any{now, reapBatch} })
	if err != nil {
		return 0, fmt.Errorf("redis: reap: %w", err)
	}
	var downErr error
	for s := range e.k.shards {
		if down[s] != nil {
			// Its master is down: the next reap returns its leases.
			downErr = cmp.Or(downErr, fmt.Errorf("redis: reap: shard %d: %w", s, down[s]))
			continue
		}
		var held []any // agents with held fires, as the first peek found them
		for first := true; ; first = false {
			v := heads[s]
			if !first {
				now = e.nowArg()
				var err error
				v, err = e.run(ctx, scriptPeekReap, []string{e.k.lease(s), e.k.held(s)}, now, reapBatch)
				if err != nil {
					return total, fmt.Errorf("redis: reap: %w", err)
				}
			}
			cands, agents, _, err := decodePeek(v)
			if err != nil {
				return total, fmt.Errorf("redis: reap: %w", err)
			}
			if first {
				held = agents
			}
			if len(cands) == 0 {
				break
			}
			n, rel, err := e.reapShard(ctx, s, now, cands)
			total += n
			released += rel
			if err != nil {
				return total, err
			}
			if len(cands) < reapBatch {
				break
			}
		}
		if err := e.recount(ctx, s); err != nil {
			return total, fmt.Errorf("redis: reap: %w", err)
		}
		rel, err := e.releaseHeld(ctx, s, held)
		released += rel
		if err != nil {
			return total, fmt.Errorf("redis: reap: %w", err)
		}
	}
	if total > 0 || released > 0 {
		e.notify()
	}
	return total, downErr
}

// reapShard runs scriptReap on expired lease candidates of shard s; it
// returns how many it returned to armed and how many held fires may go out
// (their agents made ready).
func (e *queue) reapShard(ctx context.Context, s int, now string, cands []any) (int, int, error) {
	var agents []string
	seen := make(map[string]bool)
	members := make([]any, 0, len(cands))
	for _, c := range cands {
		m, err := str(c)
		if err != nil {
			return 0, 0, fmt.Errorf("redis: reap: %w", err)
		}
		agent, _, ok := splitMember(m)
		if !ok {
			return 0, 0, fmt.Errorf("redis: reap: malformed lease entry %q", m)
		}
		if !seen[agent] {
			seen[agent] = true
			agents = append(agents, agent)
		}
		members = append(members, m)
	}
	keys := []string{e.k.lease(s), e.k.due(s), e.k.held(s), e.k.gated(s), e.k.ready(s)}
	args := []any{now, e.k.wake(), len(agents)}
	for _, a := range agents {
		fk := e.k.flowKeys(s, a)
		keys = append(keys, e.k.rows(s, a), fk[0], fk[1], fk[2])
		args = append(args, a)
	}
	args = append(args, members...)
	v, err := e.run(ctx, scriptReap, keys, args...)
	if err != nil {
		return 0, 0, fmt.Errorf("redis: reap: %w", err)
	}
	a, err := array(v)
	if err != nil || len(a) != 2 {
		return 0, 0, fmt.Errorf("redis: reap: %w", errReply)
	}
	n, err1 := integer(a[0])
	rel, err2 := integer(a[1])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("redis: reap: %w", err)
	}
	return int(n), int(rel), nil
}

// recount runs scriptRecount on shard s when recountEvery has passed since
// this engine last did (the first Reap always does): it corrects counts a
// process killed in an earlier release's middle, or a rolling upgrade,
// left wrong. A count it corrects is logged: it should not happen.
func (e *queue) recount(ctx context.Context, s int) error {
	now := time.Now()
	last := &e.recounted[s]
	if at := last.Load(); at != 0 && now.Sub(time.Unix(0, at)) < recountEvery {
		return nil
	}
	v, err := e.run(ctx, scriptRecount, []string{e.k.lease(s), e.k.inFlight(s)}, e.nowArg())
	if err != nil {
		return fmt.Errorf("recount leases in flight: %w", err)
	}
	last.Store(now.UnixNano())
	if n, _ := integer(v); n > 0 {
		e.log.Warn("redis: corrected the in-flight lease counts of agents", "shard", s, "agents", n)
	}
	return nil
}

// holding bounds the calls of a claim that already holds leases: their
// leases run from the moment Redis took them, and a call to a master that
// has just gone down, retried for Options.RetryFor, would keep them from
// their dispatcher until they lapse (and the fires of healthy masters went
// out twice). Such a call gets a tenth of the lease, between 200 ms and
// 1 s, and fails as unavailable after that; a claim holding nothing yet
// waits as any call does.
func (e *queue) holding(ctx context.Context, holds bool, leaseFor time.Duration) context.Context {
	if !holds {
		return ctx
	}
	return relay.WithCallTimeout(ctx, min(max(leaseFor/10, 200*time.Millisecond), time.Second))
}
