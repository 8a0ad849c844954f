package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// failedAckBatch is how many schedule ids one AckFailed script takes.
const failedAckBatch = 1000

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

// ListFailed implements relay.Armed.
func (e *fireRecords) ListFailed(ctx context.Context, agentID string, keep time.Duration, max int) ([]relay.DeadLetter, error) {
	if max <= 0 {
		max = relay.FailedFeedCap
	}
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptListFailed,
		[]string{e.k.failed(s, agentID), e.k.dead(s), e.k.failedList(s, agentID)},
		e.nowArg(), keepMs(keep), strconv.Itoa(max))
	if err != nil {
		return nil, fmt.Errorf("redis: list failed: %w", err)
	}
	a, err := array(v)
	if err != nil {
		return nil, fmt.Errorf("redis: list failed: %w", err)
	}
	out := make([]relay.DeadLetter, 0, len(a))
	for _, x := range a {
		d, err := decodeDead(x)
		if err != nil {
			return nil, fmt.Errorf("redis: list failed: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// AckFailed implements relay.Armed.
func (e *fireRecords) AckFailed(ctx context.Context, agentID string, keep time.Duration, scheduleIDs []string) (int, error) {
	s := e.k.shardOf(agentID)
	total := 0
	for chunk := range slices.Chunk(scheduleIDs, failedAckBatch) {
		args := make([]any, 0, 2+len(chunk))
		args = append(args, e.nowArg(), keepMs(keep))
		for _, id := range chunk {
			args = append(args, id)
		}
		v, err := e.run(ctx, scriptAckFailed, []string{e.k.failed(s, agentID), e.k.dead(s)}, args...)
		if err != nil {
			return total, fmt.Errorf("redis: ack failed: %w", err)
		}
		n, err := integer(v)
		if err != nil {
			return total, fmt.Errorf("redis: ack failed: %w", err)
		}
		total += int(n)
	}
	return total, nil
}

// keepMs is a retention as the scripts take it: whole milliseconds, at least
// 1 when positive, "0" for forever.
func keepMs(keep time.Duration) string {
	if keep <= 0 {
		return "0"
	}
	return strconv.FormatInt(max(keep.Milliseconds(), 1), 10)
}
