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
`

func script(body string) *goredis.Script { return goredis.NewScript(prelude + body) }

// durMs rounds a duration up to whole milliseconds.
func durMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
