package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/chronoscron/chronos/relay"
)

// scriptArm upserts the one-shot of (agent, job) and its due entry.
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease
// ARGV[1] now, ARGV[2] job, ARGV[3] member, ARGV[4] schedule id,
// ARGV[5] instance id, ARGV[6] fire_at ms, ARGV[7] fire_at ns remainder,
// ARGV[8] callback url, ARGV[9] quota (0 = none), ARGV[10] wake channel,
// ARGV[11] fire_at spelling ("" = canonical)
//
// Returns {1 changed | 0 same fire_at | -1 over quota, replaced schedule id, row...}.
var scriptArm = script(`
local now = clock(ARGV[1])
local job, m = ARGV[2], ARGV[3]
local fms, fns = tonumber(ARGV[6]), tonumber(ARGV[7])
local spelling = nil
if ARGV[11] ~= '' then spelling = ARGV[11] end
local old = redis.call('HGET', KEYS[1], job)
local replaced = ''
if old then
  local r = cmsgpack.unpack(old)
  if r[3] == fms and r[4] == fns then
    -- The same fire: keep its schedule id, but follow an agent that moved
    -- its callback URL or instance, or wrote the instant anew.
    if (ARGV[8] ~= '' and r[5] ~= ARGV[8]) or (ARGV[5] ~= '' and r[2] ~= ARGV[5]) or r[11] ~= spelling then
      if ARGV[8] ~= '' then r[5] = ARGV[8] end
      if ARGV[5] ~= '' then r[2] = ARGV[5] end
      r[11] = spelling
      redis.call('HSET', KEYS[1], job, cmsgpack.pack(r))
    end
    return {0, '', unpack(r)}
  end
  replaced = r[1]
else
  local quota = tonumber(ARGV[9])
  if quota > 0 and redis.call('HLEN', KEYS[1]) >= quota then
    return {-1, ''}
  end
end
local score = fms
if fns > 0 then score = fms + 1 end
local r = {ARGV[4], ARGV[5], fms, fns, ARGV[8], 0, 0, score - fms, fms - now, '', spelling}
redis.call('HSET', KEYS[1], job, cmsgpack.pack(r))
redis.call('ZREM', KEYS[3], m)
redis.call('ZADD', KEYS[2], score, m)
local first = redis.call('ZRANGE', KEYS[2], 0, 0)
if first[1] == m then redis.call('PUBLISH', ARGV[10], score) end
return {1, replaced, unpack(r)}
`)

// scriptCancel removes the one-shot of (agent, job) and its due or lease entry.
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease
// ARGV[1] now (unused), ARGV[2] job, ARGV[3] member
//
// Returns 1 if there was one, else 0.
var scriptCancel = script(`
local n = redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[3])
return n
`)

// scriptCancelAgent removes every one-shot of an agent.
//
// KEYS[1] rows of the agent, KEYS[2] due, KEYS[3] lease
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
redis.call('DEL', KEYS[1])
return #jobs
`)

// Arm implements relay.Armed: one script writes the row and its due entry.
func (e *Engine) Arm(ctx context.Context, req relay.ArmRequest) (relay.ArmResult, error) {
	if req.AgentID == "" || req.JobID == "" || req.ScheduleID == "" {
		return relay.ArmResult{}, errors.New("redis: arm: agent id, job id and schedule id are required")
	}
	s := e.k.shardOf(req.AgentID)
	fireMs := req.FireAt.UnixMilli()
	fireNs := int64(req.FireAt.Nanosecond() % 1e6)
	if req.FireAt.UnixNano() < 0 {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: fire_at %s before 1970", req.FireAt)
	}
	v, err := e.run(ctx, scriptArm,
		[]string{e.k.rows(s, req.AgentID), e.k.due(s), e.k.lease(s)},
		e.nowArg(), req.JobID, member(req.AgentID, req.JobID), req.ScheduleID,
		req.InstanceID, fireMs, fireNs, req.CallbackURL, max(req.MaxArmed, 0), e.k.wake(), req.FireAtSpelling)
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
	changed := status == 1 || o.ScheduleID == req.ScheduleID
	return relay.ArmResult{OneShot: o, Changed: changed, Replaced: replaced}, nil
}

// Cancel implements relay.Armed.
func (e *Engine) Cancel(ctx context.Context, agentID, jobID string) (bool, error) {
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptCancel,
		[]string{e.k.rows(s, agentID), e.k.due(s), e.k.lease(s)},
		e.nowArg(), jobID, member(agentID, jobID))
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
func (e *Engine) CancelAgent(ctx context.Context, agentID string) (int, error) {
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptCancelAgent, []string{e.k.rows(s, agentID), e.k.due(s), e.k.lease(s)},
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
