package redis

import (
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// prelude is shared by every script; the scripts themselves live in the
// file of their family, beside the Go that runs them.
//
// A one-shot row is a MessagePack array (cmsgpack) of
//
//	1 schedule id   2 instance id   3 fire_at ms (floor)   4 fire_at ns remainder
//	5 callback url  6 attempt       7 fencing token (0 when armed)
//	8 due ms - fire_at ms           9 fire_at ms - created ms
//	10 last error   [11 fire_at as the agent spelt it]   [12 flexible window ms]
//	[13 sealed cron key   14 cron key id   15 cron key minted ms]
//
// (Times 8 and 9 are kept as differences from fire_at: small numbers pack
// into fewer bytes. Field 11 is present only when the agent's spelling is not
// the canonical UTC form or when field 12 follows ("" then), and field 12
// only for a fire with a flexible window or when fields 13 to 15 follow (0
// then), so a canonical row costs nothing for them; rows written before
// field 12 existed read as having no window. Fields 13 to 15 are present
// only for a fire armed for direct delivery (relay.DirectKey; the key is
// sealed, never in the clear); rows written before they existed read as
// NAS-mediated. tidy() keeps a row in that shape.)
//
// A dead letter is {agent, job, <row fields 1 to 10>, reason, failed ms,
// [spelling], [flexible window ms], [sealed key, key id, minted ms]}.
//
// Every script takes ARGV[1] = the current time in ms from an injected clock,
// or "" to use Redis's own clock (production): clock() rounds TIME down,
// clockUp() rounds it up.
//
// release() is flow control's way back to the queue (see flow.go): an agent
// whose room allows its held fires out joins the shard's ready zset, where
// claims find it and lease those fires from its held zset, in due order.
// Every script that ends a lease, removes a held fire or may give an agent
// room calls it.
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
-- chunked calls cmd(key, list[from..]) in parts the Lua stack can unpack
-- (list holds pairs where cmd takes pairs: the part size is even).
local function chunked(cmd, key, list, from)
  for i = from, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end
local function fenced(v, sid, tok)
  if not v then return nil end
  local r = cmsgpack.unpack(v)
  if r[1] ~= sid or r[7] == 0 or r[7] ~= tok then return nil end
  return r
end
-- tidy keeps a row an array cmsgpack packs as one: fields 13 to 15 (the
-- sealed cron key, its id and mint time) only for a direct fire, field 12
-- (the flexible window) only when positive or when they follow (0 then),
-- field 11 (the spelling) then at least '', else only when set.
local function tidy(r)
  if r[13] == nil or r[13] == '' then
    r[13], r[14], r[15] = nil, nil, nil
  else
    if not r[12] then r[12] = 0 end
    if not r[11] then r[11] = '' end
    return r
  end
  if r[12] == 0 then r[12] = nil end
  if r[12] then
    if not r[11] then r[11] = '' end
  elseif r[11] == '' then
    r[11] = nil
  end
  return r
end
-- gateOf is when an agent may next have a fire claimed (ms): the later of
-- its Down hold and its rate's next slot (kept with a fraction).
local function gateOf(gate, tat)
  return math.max(tonumber(gate) or 0, math.ceil(tonumber(tat) or 0))
end
-- sets gathers a script's changes to the shard's sets of agents (the
-- ready zset, the held set, the gated zset) and flush() makes them, one
-- call per set and kind: settling many agents costs a few calls in all.
-- Removals go first, so an agent both removed from a set and added to it
-- ends up in it.
local function sets(ready, held, gated)
  return {ready = ready, held = held, gated = gated, rdy = {}, unrdy = {}, hold = {}, unhold = {}, gate = {}, ungate = {}}
end
local function flush(b)
  if #b.unrdy > 0 then chunked('ZREM', b.ready, b.unrdy, 1) end
  if #b.rdy > 0 then chunked('ZADD', b.ready, b.rdy, 1) end
  if #b.unhold > 0 then chunked('SREM', b.held, b.unhold, 1) end
  if #b.hold > 0 then chunked('SADD', b.held, b.hold, 1) end
  if #b.ungate > 0 then chunked('ZREM', b.gated, b.ungate, 1) end
  if #b.gate > 0 then chunked('ZADD', b.gated, b.gate, 1) end
end
-- inSet tells which of names are members of set: one SMISMEMBER per
-- thousand names (the most unpack() passes safely); it returns a table of
-- name -> true for the members.
local function inSet(set, names)
  local t = {}
  for i = 1, #names, 1000 do
    local to = math.min(i + 999, #names)
    local in_ = redis.call('SMISMEMBER', set, unpack(names, i, to))
    for k = i, to do
      if in_[k - i + 1] == 1 then t[names[k]] = true end
    end
  end
  return t
end
local function push(t, x, y)
  t[#t + 1] = x
  if y ~= nil then t[#t + 1] = y end
end
-- leasesOf is how many leases agent has in flight (inf: the shard's
-- in-flight counts).
local function leasesOf(inf, agent)
  return tonumber(redis.call('HGET', inf, agent)) or 0
end
-- ended counts n leases of agent out of the shard's in-flight counts.
local function ended(inf, agent, n)
  if n > 0 and redis.call('HINCRBY', inf, agent, -n) <= 0 then
    redis.call('HDEL', inf, agent)
  end
end
-- bump changes the in-flight counts of many agents at once: names[i] by
-- by[i]; one HMGET, one HSET and one HDEL per thousand agents.
local function bump(inf, names, by)
  for i = 1, #names, 1000 do
    local to = math.min(i + 999, #names)
    local cur = redis.call('HMGET', inf, unpack(names, i, to))
    local set, del = {}, {}
    for k = i, to do
      local n = (tonumber(cur[k - i + 1]) or 0) + by[k]
      if n > 0 then
        set[#set + 1] = names[k]
        set[#set + 1] = n
      else
        del[#del + 1] = names[k]
      end
    end
    if #set > 0 then redis.call('HSET', inf, unpack(set)) end
    if #del > 0 then redis.call('HDEL', inf, unpack(del)) end
  end
end
-- release tells claims whether agent (its record ag, the shard's in-flight
-- counts inf, its held fires hd) has room for its held fires: the room is
-- 1 while it probes, else the parallelism its last claim that held applied (0:
-- unbounded), less its leases in flight. An agent with room joins the shard's ready zset,
-- by the due time of its earliest held fire, and the next claim leases
-- those fires straight from hd, oldest first; one without room leaves it
-- (its next lease to end calls release again). A disabled agent has no
-- room; nor has one whose gate has not passed, which is kept in the gated
-- zset until then. It keeps the held set, the gated zset and the ready
-- zset in step (through the sets b: the caller flushes them) and returns
-- how many held fires the room lets go out (what callers announce on the
-- wake channel); it moves no fire.
-- nudge is release() for the hot path of an ack: agent (held fires hd)
-- has just had a lease end, which gives it room in all but a few cases (a
-- rate slot or Down hold not passed, a kill switch, leases of a lowered
-- parallelism), so it joins the ready zset without reading its record or
-- counting its leases; the claim that meets it there reads both, and an
-- agent without room after all leaves the ready zset for the gated one
-- (or for none) then. It returns 1 when the agent holds fires, else 0.
local function nudge(agent, hd, b)
  local head = redis.call('ZRANGE', hd, 0, 0, 'WITHSCORES')
  if not head[1] then
    push(b.unhold, agent)
    push(b.ungate, agent)
    push(b.unrdy, agent)
    return 0
  end
  push(b.rdy, head[2], agent)
  return 1
end
local function release(now, agent, ag, inf, hd, b)
  local head = redis.call('ZRANGE', hd, 0, 0, 'WITHSCORES')
  if not head[1] then
    push(b.unhold, agent)
    push(b.ungate, agent)
    push(b.unrdy, agent)
    return 0
  end
  local f = redis.call('HMGET', ag, 'dis', 'gate', 'tat', 'probe', 'ep')
  if f[1] == '1' then
    push(b.ungate, agent)
    push(b.unrdy, agent)
    return 0
  end
  local g = gateOf(f[2], f[3])
  if g > now then
    push(b.gate, g, agent)
    push(b.unrdy, agent)
    return 0
  end
  -- Only an agent with a gate or a rate slot can be in the gated zset.
  if f[2] or f[3] then push(b.ungate, agent) end
  local room = tonumber(f[5]) or 0
  if f[4] == '1' then room = 1 end
  if room > 0 then
    room = room - leasesOf(inf, agent)
    if room <= 0 then
      push(b.unrdy, agent)
      return 0
    end
  end
  push(b.rdy, head[2], agent)
  -- It holds one at least.
  if room == 1 then return 1 end
  local n = redis.call('ZCARD', hd)
  if room > 0 then n = math.min(n, room) end
  return n
end
`

func script(body string) *goredis.Script { return goredis.NewScript(prelude + body) }

// durMs rounds a duration up to whole milliseconds.
func durMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
