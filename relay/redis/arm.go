package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// scriptArm upserts the one-shot of (agent, job) and its due entry. A
// one-shot it replaces loses its lease (its agent's held fires get the room
// it frees) or its place among its agent's held fires.
//
// The due entry of a fire due at ms X scores in (X-1, X]: X-1 plus k+1
// 1024ths for the agent's k-th fire armed due in X (the last 1022 and on
// share the last step). Claims compare scores with whole milliseconds, so
// the fire is due at X exactly as with the score X; but fires due in the
// same millisecond, a herd armed for 09:00, come up in claims interleaved
// across agents, each agent's in the order it armed them, where equal
// scores would sort them by member, that is agent by agent: each claim
// then took one agent's fires, its first in name order, and held all but
// its parallelism's worth of them back for nothing. Each shard keeps, per
// agent, the last due ms armed and its count (KEYS[11]).
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease, KEYS[4] flow
// record, KEYS[5] in-flight counts, KEYS[6] held, KEYS[7] flexible fires,
// KEYS[8] held agents, KEYS[9] gated agents, KEYS[10] ready agents,
// KEYS[11] the shard's tie counts
// ARGV[1] now, ARGV[2] job, ARGV[3] member, ARGV[4] schedule id,
// ARGV[5] instance id, ARGV[6] fire_at ms, ARGV[7] fire_at ns remainder,
// ARGV[8] callback url, ARGV[9] quota (0 = none), ARGV[10] wake channel,
// ARGV[11] fire_at spelling ("" = canonical), ARGV[12] due ms,
// ARGV[13] flexible window ms, ARGV[14] agent, and for a direct fire only
// (a NAS-mediated arm passes none of them): ARGV[15] sealed cron key,
// ARGV[16] its id, ARGV[17] when it was minted, ms, ARGV[18] keep a held
// key minted at or after this, ms (see relay.ArmKey)
//
// Returns {status, replaced schedule id, row...}: status is -1 over quota,
// else 1 when the fire changed (0 for the same fire_at and window) plus 2
// when the arm changed the row's cron key or delivery mode.
var scriptArm = script(`
local now = clock(ARGV[1])
local job, m, agent = ARGV[2], ARGV[3], ARGV[14]
local fms, fns = tonumber(ARGV[6]), tonumber(ARGV[7])
local flex = tonumber(ARGV[13])
local spelling = nil
if ARGV[11] ~= '' then spelling = ARGV[11] end
local old = redis.call('HGET', KEYS[1], job)
local replaced = ''
local freed = 0
-- The cron key the row gets (relay.ArmKey): none for a NAS-mediated arm.
local ks, kid, kms = nil, nil, nil
if ARGV[15] then ks, kid, kms = ARGV[15], ARGV[16], tonumber(ARGV[17]) end
local rekey = 0
if old then
  local r = cmsgpack.unpack(old)
  local held = r[13] and r[13] ~= ''
  if not ks then
    if held then rekey = 2 end
  elseif held and r[15] >= tonumber(ARGV[18]) then
    ks, kid, kms = r[13], r[14], r[15]
  else
    rekey = 2
  end
  if r[3] == fms and r[4] == fns and (r[12] or 0) == flex then
    -- The same fire: keep its schedule id, but follow an agent that moved
    -- its callback URL or instance, or wrote the instant anew, and take
    -- the arm's cron key.
    local was = r[11]
    if was == '' then was = nil end
    if (ARGV[8] ~= '' and r[5] ~= ARGV[8]) or (ARGV[5] ~= '' and r[2] ~= ARGV[5]) or was ~= spelling or rekey > 0 then
      if ARGV[8] ~= '' then r[5] = ARGV[8] end
      if ARGV[5] ~= '' then r[2] = ARGV[5] end
      r[11] = spelling
      r[13], r[14], r[15] = ks, kid, kms
      redis.call('HSET', KEYS[1], job, cmsgpack.pack(tidy(r)))
    end
    return {rekey, '', unpack(r)}
  end
  replaced = r[1]
  local leased = redis.call('ZREM', KEYS[3], m)
  ended(KEYS[5], agent, leased)
  freed = leased + redis.call('ZREM', KEYS[6], job)
else
  local quota = tonumber(ARGV[9])
  if quota > 0 and redis.call('HLEN', KEYS[1]) >= quota then
    return {-1, ''}
  end
end
local score = tonumber(ARGV[12])
-- The due entry's score: due ms less one, plus k + 1 1024ths for the
-- agent's k-th fire due in that same millisecond.
local tie = redis.call('HGET', KEYS[11], agent)
local k = 0
if tie then
  local i = string.find(tie, ':', 1, true)
  if tonumber(string.sub(tie, 1, i - 1)) == score then k = tonumber(string.sub(tie, i + 1)) + 1 end
end
redis.call('HSET', KEYS[11], agent, string.format('%d:%d', score, k))
local due = string.format('%d', score - 1) .. string.sub(string.format('%.10f', (math.min(k, 1022) + 1) / 1024), 2)
local r = tidy({ARGV[4], ARGV[5], fms, fns, ARGV[8], 0, 0, score - fms, fms - now, '', spelling, flex, ks, kid, kms})
redis.call('HSET', KEYS[1], job, cmsgpack.pack(r))
if not old then
  -- No row, no lease (whatever an earlier release may have left).
  redis.call('ZREM', KEYS[3], m)
end
if flex > 0 then
  local fire = fms
  if fns > 0 then fire = fms + 1 end
  redis.call('ZADD', KEYS[7], fire, job)
  redis.call('HSET', KEYS[4], 'fx', '1')
elseif old then
  redis.call('ZREM', KEYS[7], job)
end
redis.call('ZADD', KEYS[2], due, m)
local rel = 0
if freed > 0 then
  local b = sets(KEYS[10], KEYS[8], KEYS[9])
  rel = release(now, agent, KEYS[4], KEYS[5], KEYS[6], b)
  flush(b)
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0)
if first[1] == m or rel > 0 then redis.call('PUBLISH', ARGV[10], score) end
return {1 + rekey, replaced, unpack(r)}
`)

// scriptCancel removes the one-shot of (agent, job) and its due or lease
// entry, or its place among its agent's held fires. A lease it ends gives
// the agent's held fires the room it frees.
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease, KEYS[4] flow
// record, KEYS[5] in-flight counts, KEYS[6] held, KEYS[7] flexible fires,
// KEYS[8] held agents, KEYS[9] gated agents, KEYS[10] ready agents
// ARGV[1] now, ARGV[2] job, ARGV[3] member, ARGV[4] agent, ARGV[5] wake channel
//
// Returns 1 if there was one, else 0.
var scriptCancel = script(`
local job = ARGV[2]
local n = redis.call('HDEL', KEYS[1], job)
redis.call('ZREM', KEYS[2], ARGV[3])
local leased = redis.call('ZREM', KEYS[3], ARGV[3])
ended(KEYS[5], ARGV[4], leased)
redis.call('ZREM', KEYS[7], job)
if leased + redis.call('ZREM', KEYS[6], job) > 0 then
  local now = clock(ARGV[1])
  local b = sets(KEYS[10], KEYS[8], KEYS[9])
  local rel = release(now, ARGV[4], KEYS[4], KEYS[5], KEYS[6], b)
  flush(b)
  if rel > 0 then
    redis.call('PUBLISH', ARGV[5], now)
  end
end
return n
`)

// scriptCancelAgent removes every one-shot of an agent, its in-flight
// leases, held and flexible fires; its flow record (policy, probe, phase)
// stays.
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease, KEYS[4] in-flight
// counts, KEYS[5] held, KEYS[6] flexible fires, KEYS[7] held agents,
// KEYS[8] gated agents, KEYS[9] ready agents, KEYS[10] where an earlier
// release kept the agent's in-flight leases, KEYS[11] the shard's tie
// counts (see scriptArm)
// ARGV[1] now (unused), ARGV[2] agent
//
// Returns how many there were.
var scriptCancelAgent = script(`
local agent = ARGV[2]
local jobs = redis.call('HKEYS', KEYS[1])
for _, job in ipairs(jobs) do
  local m = #agent .. ':' .. agent .. job
  redis.call('ZREM', KEYS[2], m)
  redis.call('ZREM', KEYS[3], m)
end
redis.call('DEL', KEYS[1], KEYS[5], KEYS[6], KEYS[10])
redis.call('HDEL', KEYS[4], agent)
redis.call('HDEL', KEYS[11], agent)
redis.call('SREM', KEYS[7], agent)
redis.call('ZREM', KEYS[8], agent)
redis.call('ZREM', KEYS[9], agent)
return #jobs
`)

// Arm implements relay.Armed: one script writes the row and its due entry.
func (e *queue) Arm(ctx context.Context, req relay.ArmRequest) (relay.ArmResult, error) {
	if req.AgentID == "" || req.JobID == "" || req.ScheduleID == "" {
		return relay.ArmResult{}, errors.New("redis: arm: agent id, job id and schedule id are required")
	}
	s := e.k.shardOf(req.AgentID)
	fireMs := req.FireAt.UnixMilli()
	fireNs := int64(req.FireAt.Nanosecond() % 1e6)
	if req.FireAt.UnixNano() < 0 {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: fire_at %s before 1970", req.FireAt)
	}
	if req.Flex < 0 || req.Flex > relay.MaxFlex {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: flexible window %s is not within 0 and %s", req.Flex, relay.MaxFlex)
	}
	due := req.FireAt
	if !req.DueAt.IsZero() {
		if req.DueAt.Before(req.FireAt) || req.DueAt.After(req.FireAt.Add(req.Flex)) {
			return relay.ArmResult{}, fmt.Errorf("redis: arm: due %s is outside the window of fire_at %s (flex %s)", req.DueAt, req.FireAt, req.Flex)
		}
		due = req.DueAt
	}
	dueMs := due.UnixMilli()
	if due.Nanosecond()%1e6 != 0 {
		dueMs++ // rounded up: never claimable early
	}
	fk := e.k.flowKeys(s, req.AgentID)
	args := []any{e.nowArg(), req.JobID, member(req.AgentID, req.JobID), req.ScheduleID,
		req.InstanceID, fireMs, fireNs, req.CallbackURL, max(req.MaxArmed, 0), e.k.wake(), req.FireAtSpelling,
		dueMs, durMs(req.Flex), req.AgentID}
	if d := req.Direct; d.IsDirect() {
		if d.KeyID == "" || d.MintedAt.UnixNano() < 0 {
			return relay.ArmResult{}, errors.New("redis: arm: a direct fire needs its key id and mint time")
		}
		// Milliseconds: a key minted in the millisecond of KeepKeyFrom, but
		// before it, is not kept (rounded up; at worst one key too many).
		keep := int64(0)
		if !req.KeepKeyFrom.IsZero() {
			keep = ceilMs(req.KeepKeyFrom)
		}
		args = append(args, d.Sealed, d.KeyID, d.MintedAt.UnixMilli(), keep)
	}
	v, err := e.runWrite(ctx, scriptArm,
		[]string{e.k.rows(s, req.AgentID), e.k.due(s), e.k.lease(s), fk[0], fk[1], fk[2], e.k.flexOf(s, req.AgentID),
			e.k.held(s), e.k.gated(s), e.k.ready(s), e.k.ties(s)},
		args...)
	if err != nil {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", err)
	}
	a, err := array(v)
	if err != nil || len(a) < 2 {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", errReply)
	}
	status, err := integer(a[0])
	if err != nil {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", err)
	}
	if status < 0 {
		return relay.ArmResult{}, fmt.Errorf("redis: arm %s/%s: %w", req.AgentID, req.JobID, relay.ErrQuotaExceeded)
	}
	replaced, err := str(a[1])
	if err != nil {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", err)
	}
	o, err := decodeRow(req.AgentID, req.JobID, a[2:])
	if err != nil {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", err)
	}
	// A retry whose first try was applied but whose reply was lost finds its
	// own schedule id in place: that arm did change the row.
	changed := status&1 == 1 || o.ScheduleID == req.ScheduleID
	return relay.ArmResult{OneShot: o, Changed: changed, Replaced: replaced, Rekeyed: status&2 == 2}, nil
}

// ceilMs returns t in Unix milliseconds, rounded up.
func ceilMs(t time.Time) int64 {
	v := t.UnixMilli()
	if t.After(time.UnixMilli(v)) {
		v++
	}
	return v
}

// Cancel implements relay.Armed.
func (e *queue) Cancel(ctx context.Context, agentID, jobID string) (bool, error) {
	s := e.k.shardOf(agentID)
	fk := e.k.flowKeys(s, agentID)
	v, err := e.run(ctx, scriptCancel,
		[]string{e.k.rows(s, agentID), e.k.due(s), e.k.lease(s), fk[0], fk[1], fk[2], e.k.flexOf(s, agentID),
			e.k.held(s), e.k.gated(s), e.k.ready(s)},
		e.nowArg(), jobID, member(agentID, jobID), agentID, e.k.wake())
	if err != nil {
		return false, fmt.Errorf("redis: cancel: %w", err)
	}
	n, err := integer(v)
	if err != nil {
		return false, fmt.Errorf("redis: cancel: %w", err)
	}
	return n > 0, nil
}

// CancelAgent implements relay.Control.
func (e *queue) CancelAgent(ctx context.Context, agentID string) (int, error) {
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptCancelAgent,
		[]string{e.k.rows(s, agentID), e.k.due(s), e.k.lease(s), e.k.inFlight(s), e.k.heldOf(s, agentID),
			e.k.flexOf(s, agentID), e.k.held(s), e.k.gated(s), e.k.ready(s), e.k.legacyInFlight(s, agentID), e.k.ties(s)},
		e.nowArg(), agentID)
	if err != nil {
		return 0, fmt.Errorf("redis: cancel agent: %w", err)
	}
	n, err := integer(v)
	if err != nil {
		return 0, fmt.Errorf("redis: cancel agent: %w", err)
	}
	return int(n), nil
}
