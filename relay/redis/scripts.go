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
//
// (Times 8 and 9 are kept as differences from fire_at: small numbers pack
// into fewer bytes. Field 11 is present only when the agent's spelling is not
// the canonical UTC form or when field 12 follows ("" then), and field 12
// only for a fire with a flexible window, so a canonical row costs nothing
// for them; rows written before field 12 existed read as having no window.
// tidy() keeps a row in that shape.)
//
// A dead letter is {agent, job, <row fields 1 to 10>, reason, failed ms,
// [spelling], [flexible window ms]}.
//
// Every script takes ARGV[1] = the current time in ms from an injected clock,
// or "" to use Redis's own clock (production): clock() rounds TIME down,
// clockUp() rounds it up.
//
// release() is flow control's way back to the queue (see flow.go): it
// returns as many of an agent's held fires to the due zset as its room
// allows. Every script that ends a lease or may give an agent room calls it.
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
-- tidy keeps a row an array cmsgpack packs as one: field 12 (the flexible
-- window) only when positive, field 11 (the spelling) then at least '',
-- else only when set.
local function tidy(r)
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
-- release returns up to the room of agent (its record ag, in-flight leases
-- fl, held fires hd) of its held fires to the due zset, lowest due time
-- first, with their due times; the room is 1 while it probes, else the
-- parallelism its last claim applied (0: unbounded), less its unexpired
-- leases. A disabled agent gets none back; one whose gate has not passed
-- none either, and it is kept in the gated zset until then. It keeps the
-- held set and the gated zset in step and returns how many fires it moved.
local function release(now, agent, ag, fl, hd, due, held, gated)
  if redis.call('EXISTS', hd) == 0 then
    redis.call('SREM', held, agent)
    redis.call('ZREM', gated, agent)
    return 0
  end
  local f = redis.call('HMGET', ag, 'dis', 'gate', 'tat', 'probe', 'ep')
  if f[1] == '1' then
    redis.call('ZREM', gated, agent)
    return 0
  end
  local g = gateOf(f[2], f[3])
  if g > now then
    redis.call('ZADD', gated, g, agent)
    return 0
  end
  redis.call('ZREM', gated, agent)
  local room = tonumber(f[5]) or 0
  if f[4] == '1' then room = 1 end
  local last = -1
  if room > 0 then
    room = room - redis.call('ZCOUNT', fl, '(' .. now, '+inf')
    if room <= 0 then return 0 end
    last = room - 1
  end
  local page = redis.call('ZRANGE', hd, 0, last, 'WITHSCORES')
  local add, jobs = {}, {}
  local pre = #agent .. ':' .. agent
  for i = 1, #page, 2 do
    jobs[#jobs + 1] = page[i]
    add[#add + 1] = page[i + 1]
    add[#add + 1] = pre .. page[i]
  end
  if #jobs == 0 then return 0 end
  chunked('ZADD', due, add, 1)
  chunked('ZREM', hd, jobs, 1)
  if redis.call('EXISTS', hd) == 0 then redis.call('SREM', held, agent) end
  return #jobs
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
