package redis

import goredis "github.com/redis/go-redis/v9"

// prelude is shared by every script.
//
// A one-shot row is a MessagePack array (cmsgpack) of
//
//	1 schedule id   2 instance id   3 fire_at ms (floor)   4 fire_at ns remainder
//	5 callback url  6 attempt       7 fencing token (0 when armed)
//	8 due ms - fire_at ms           9 fire_at ms - created ms
//	10 last error   [11 fire_at as the agent spelt it]
//
// (Times 8 and 9 are kept as differences from fire_at: small numbers pack
// into fewer bytes. Field 11 is present only when the agent's spelling is not
// the canonical UTC form, so a canonical row costs nothing for it.)
//
// A dead letter is {agent, job, <row fields 1 to 10>, reason, failed ms,
// [spelling]}.
//
// Every script takes ARGV[1] = the current time in ms from an injected clock,
// or "" to use Redis's own clock (production): clock() rounds TIME down,
// clockUp() rounds it up.
const prelude = `
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function clockUp(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end
local function split(m)
  local i = string.find(m, ':', 1, true)
  local n = tonumber(string.sub(m, 1, i - 1))
  return string.sub(m, i + 1, i + n), string.sub(m, i + n + 1)
end
local function fenced(v, sid, tok)
  if not v then return nil end
  local r = cmsgpack.unpack(v)
  if r[1] ~= sid or r[7] == 0 or r[7] ~= tok then return nil end
  return r
end
`

func script(body string) *goredis.Script { return goredis.NewScript(prelude + body) }

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

// scriptList pages an agent's one-shots in job id order.
//
// KEYS[1] rows of the agent
// ARGV[1] now (unused), ARGV[2] the job id to start after ("" = first),
// ARGV[3] limit
//
// Returns {more (0|1), job, row, job, row, ...}.
var scriptList = script(`
local after, limit = ARGV[2], tonumber(ARGV[3])
local jobs = {}
for _, j in ipairs(redis.call('HKEYS', KEYS[1])) do
  if after == '' or j > after then jobs[#jobs + 1] = j end
end
table.sort(jobs)
local out = {0}
if #jobs > limit then out[1] = 1 end
for i = 1, math.min(limit, #jobs) do
  out[#out + 1] = jobs[i]
  out[#out + 1] = cmsgpack.unpack(redis.call('HGET', KEYS[1], jobs[i]))
end
return out
`)

// scriptPeek lists due candidates without changing anything; the claim or
// reap that follows re-checks each one.
//
// KEYS[1] due or lease zset
// ARGV[1] now, ARGV[2] count, ARGV[3] "due" (score <= now) or "expired" (score < now)
//
// Returns up to count members in score order.
var scriptPeek = script(`
local now = clock(ARGV[1])
local max = now
if ARGV[3] == 'expired' then max = '(' .. now end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', max, 'LIMIT', 0, tonumber(ARGV[2]))
`)

// scriptClaim leases the candidates that are still due.
//
// KEYS[1] due, KEYS[2] lease, KEYS[3] token counter,
// KEYS[3+i] rows of the agent of candidate i
// ARGV[1] now, ARGV[2] lease ms, ARGV[3] max, ARGV[3+i] member of candidate i
//
// Returns {{agent, job, lease until ms, row...}, ...} in candidate order.
var scriptClaim = script(`
local now = clock(ARGV[1])
local untilms = now + tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV do
  if #out >= max then break end
  local m = ARGV[i]
  local s = redis.call('ZSCORE', KEYS[1], m)
  if s and tonumber(s) <= now then
    redis.call('ZREM', KEYS[1], m)
    local agent, job = split(m)
    local v = redis.call('HGET', KEYS[i], job)
    if v then
      local r = cmsgpack.unpack(v)
      r[6] = r[6] + 1
      r[7] = redis.call('INCR', KEYS[3])
      redis.call('HSET', KEYS[i], job, cmsgpack.pack(r))
      redis.call('ZADD', KEYS[2], untilms, m)
      out[#out + 1] = {agent, job, untilms, unpack(r)}
    end
  end
end
return out
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

// scriptReap returns the candidates whose lease has expired to armed, due now.
//
// KEYS[1] lease, KEYS[2] due, KEYS[2+i] rows of the agent of candidate i
// ARGV[1] now, ARGV[2] wake channel, ARGV[2+i] member of candidate i
//
// Returns how many were returned; when any was, they are announced on the
// wake channel (they are due now).
var scriptReap = script(`
local now = clock(ARGV[1])
local n = 0
for i = 3, #ARGV do
  local m = ARGV[i]
  local s = redis.call('ZSCORE', KEYS[1], m)
  if s and tonumber(s) < now then
    redis.call('ZREM', KEYS[1], m)
    local agent, job = split(m)
    local v = redis.call('HGET', KEYS[i], job)
    if v then
      local r = cmsgpack.unpack(v)
      r[7] = 0
      r[8] = now - r[3]
      redis.call('HSET', KEYS[i], job, cmsgpack.pack(r))
      redis.call('ZADD', KEYS[2], now, m)
      n = n + 1
    end
  end
end
if n > 0 then redis.call('PUBLISH', ARGV[2], now) end
return n
`)

// scriptHead reads the earliest due entry of a shard and Redis's clock.
//
// KEYS[1] due
// ARGV[1] now (unused)
//
// Returns {earliest due ms or -1, Redis time s, Redis time µs}.
var scriptHead = script(`
local t = redis.call('TIME')
local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local s = -1
if h[2] then s = tonumber(h[2]) end
return {s, tonumber(t[1]), tonumber(t[2])}
`)

// scriptListFailed reads an agent's failed-fire feed, oldest first, without
// consuming it. It drops the entries older than the retention and those whose
// dead letter was replayed, and first moves a feed an earlier version kept as
// a list into the zset.
//
// KEYS[1] failed feed of the agent, KEYS[2] dead, KEYS[3] the agent's feed list
// of earlier versions
// ARGV[1] now, ARGV[2] retention ms (0 = forever), ARGV[3] max
//
// Returns {dead letter, ...}.
var scriptListFailed = script(`
local now = clock(ARGV[1])
local keep, max = tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[3]) == 1 then
  for _, sid in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    local v = redis.call('HGET', KEYS[2], sid)
    if v then redis.call('ZADD', KEYS[1], 'NX', cmsgpack.unpack(v)[14], sid) end
  end
  redis.call('DEL', KEYS[3])
end
if keep > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - keep)) end
local out, gone = {}, {}
local off = 0
while #out < max do
  local page = redis.call('ZRANGE', KEYS[1], off, off + 99)
  if #page == 0 then break end
  off = off + #page
  for _, sid in ipairs(page) do
    local v = redis.call('HGET', KEYS[2], sid)
    if v then
      out[#out + 1] = cmsgpack.unpack(v)
      if #out >= max then break end
    else
      gone[#gone + 1] = sid
    end
  end
end
for _, sid in ipairs(gone) do redis.call('ZREM', KEYS[1], sid) end
return out
`)

// scriptAckFailed removes acknowledged entries from an agent's failed-fire
// feed.
//
// KEYS[1] failed feed of the agent, KEYS[2] dead
// ARGV[1] now, ARGV[2] retention ms (0 = forever), ARGV[3...] schedule ids
//
// Returns how many of them were listable: in the feed, not expired, still
// dead-lettered.
var scriptAckFailed = script(`
local now = clock(ARGV[1])
local keep = tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s then
    redis.call('ZREM', KEYS[1], ARGV[i])
    if (keep <= 0 or tonumber(s) >= now - keep) and redis.call('HEXISTS', KEYS[2], ARGV[i]) == 1 then
      n = n + 1
    end
  end
end
return n
`)

// scriptListDead pages dead letters newest first.
//
// KEYS[1] dead by time (or of one agent), KEYS[2] dead
// ARGV[1] now (unused), ARGV[2] start at failed ms ("+inf" = newest),
// ARGV[3] the schedule id to start after at that ms ("" = none), ARGV[4] count
//
// Returns {{failed ms, dead letter}, ...}: up to count entries strictly after
// the position (failed ms desc, schedule id desc).
var scriptListDead = script(`
local maxs, after, count = ARGV[2], ARGV[3], tonumber(ARGV[4])
local out = {}
local off = 0
while #out < count do
  local page = redis.call('ZREVRANGEBYSCORE', KEYS[1], maxs, '-inf', 'WITHSCORES', 'LIMIT', off, 100)
  if #page == 0 then break end
  off = off + #page / 2
  for i = 1, #page, 2 do
    local sid, score = page[i], page[i + 1]
    if after == '' or tonumber(score) ~= tonumber(maxs) or sid < after then
      local v = redis.call('HGET', KEYS[2], sid)
      if v then out[#out + 1] = cmsgpack.unpack(v) end
      if #out >= count then break end
    end
  end
end
return out
`)

// scriptDeadAgents maps schedule ids to the agents of their dead letters.
//
// KEYS[1] dead
// ARGV[1] now (unused), ARGV[2...] schedule ids
//
// Returns {schedule id, agent, ...} for the ids found.
var scriptDeadAgents = script(`
local out = {}
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    local d = cmsgpack.unpack(v)
    out[#out + 1] = ARGV[i]
    out[#out + 1] = d[1]
  end
end
return out
`)

// scriptReplay re-arms dead letters, due now, with attempts reset; one whose
// job was armed again since is dropped instead.
//
// KEYS[1] dead, KEYS[2] dead by time, KEYS[3] due,
// KEYS[2+2i] rows of the agent of id i, KEYS[3+2i] dead of the agent of id i
// ARGV[1] now, ARGV[2] wake channel, ARGV[1+2i] schedule id i, ARGV[2+2i] agent of id i
//
// Returns how many were re-armed.
var scriptReplay = script(`
local now = clock(ARGV[1])
local n = 0
local i = 1
while 2 + 2 * i <= #ARGV do
  local sid, agent = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local rows, dagent = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local v = redis.call('HGET', KEYS[1], sid)
  if v then
    local d = cmsgpack.unpack(v)
    if d[1] == agent then
      redis.call('HDEL', KEYS[1], sid)
      redis.call('ZREM', KEYS[2], sid)
      redis.call('ZREM', dagent, sid)
      local job = d[2]
      if redis.call('HEXISTS', rows, job) == 0 then
        local r = {d[3], d[4], d[5], d[6], d[7], 0, 0, now - d[5], d[11], d[12], d[15]}
        redis.call('HSET', rows, job, cmsgpack.pack(r))
        redis.call('ZADD', KEYS[3], now, #agent .. ':' .. agent .. job)
        n = n + 1
      end
    end
  else
    redis.call('ZREM', dagent, sid)
  end
  i = i + 1
end
if n > 0 then redis.call('PUBLISH', ARGV[2], now) end
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

// scriptStats counts a shard's entries.
//
// KEYS[1] due, KEYS[2] lease, KEYS[3] dead by time
// ARGV[1] now
//
// Returns {armed entries, due entries, leased entries, dead letters}.
var scriptStats = script(`
local now = clock(ARGV[1])
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCOUNT', KEYS[1], '-inf', now),
  redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])}
`)

// scriptSetStopped stops or starts an agent instance.
//
// KEYS[1] stopped set
// ARGV[1] now (unused), ARGV[2] instance id, ARGV[3] "1" stop | "0" start
//
// Returns 1.
var scriptSetStopped = script(`
if ARGV[3] == '1' then redis.call('SADD', KEYS[1], ARGV[2]) else redis.call('SREM', KEYS[1], ARGV[2]) end
return 1
`)

// scriptFirstDelivery records a delivery id unless it is already recorded
// and not yet expired by the engine's clock. The record holds the caller's
// nonce, so a retry of a call whose reply was lost is still told "first".
//
// KEYS[1] the delivery's record
// ARGV[1] now, ARGV[2] ttl ms, ARGV[3] nonce of this call
//
// Returns 1 the first time, else 0.
var scriptFirstDelivery = script(`
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
if v then
  local sp = string.find(v, ' ', 1, true)
  if string.sub(v, sp + 1) == ARGV[3] then return 1 end
  if tonumber(string.sub(v, 1, sp - 1)) >= now then return 0 end
end
redis.call('SET', KEYS[1], (now + ttl) .. ' ' .. ARGV[3], 'PX', ttl)
return 1
`)

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

// scriptEpoch checks the epoch marker: one missing is written (and, when the
// caller knew another, the loss reported); one replaced is reported as a
// loss unless one is already reported.
//
// KEYS[1] epoch marker, KEYS[2] lost report, KEYS[3] shard count
// ARGV[1] now, ARGV[2] the marker the caller knows ("" = none yet),
// ARGV[3] a fresh marker, ARGV[4] how long a loss is reported (ms),
// ARGV[5] the shard count
//
// Returns {marker in force, now ms} or, while a loss is reported,
// {marker in force, now ms, report, report ms left}.
var scriptEpoch = script(`
local now = clock(ARGV[1])
local known = ARGV[2]
local cur = redis.call('GET', KEYS[1])
if not cur then
  cur = ARGV[3]
  redis.call('SET', KEYS[1], cur)
  redis.call('SET', KEYS[3], ARGV[5], 'NX')
  if known ~= '' then
    redis.call('SET', KEYS[2], now .. ' gone', 'PX', tonumber(ARGV[4]))
  end
elseif known ~= '' and cur ~= known then
  redis.call('SET', KEYS[2], now .. ' replaced', 'NX', 'PX', tonumber(ARGV[4]))
end
local lost = redis.call('GET', KEYS[2])
if not lost then return {cur, now} end
return {cur, now, lost, redis.call('PTTL', KEYS[2])}
`)
