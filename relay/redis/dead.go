package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/chronoscron/chronos/relay"
)

// replayBatch is how many dead letters one replay step handles.
const replayBatch = 256

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
// Returns {{outcome, dead letter or schedule id}, ...} in the order of the
// ids: outcome 1 re-armed, 0 dropped (the job is armed), each with the dead
// letter; 2 not there (with the schedule id).
var scriptReplay = script(`
local now = clock(ARGV[1])
local out = {}
local n = 0
local i = 1
while 2 + 2 * i <= #ARGV do
  local sid, agent = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local rows, dagent = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local v = redis.call('HGET', KEYS[1], sid)
  local d = v and cmsgpack.unpack(v)
  if d and d[1] == agent then
    redis.call('HDEL', KEYS[1], sid)
    redis.call('ZREM', KEYS[2], sid)
    redis.call('ZREM', dagent, sid)
    local job = d[2]
    if redis.call('HEXISTS', rows, job) == 0 then
      local r = tidy({d[3], d[4], d[5], d[6], d[7], 0, 0, now - d[5], d[11], d[12], d[15], d[16], d[17], d[18], d[19]})
      redis.call('HSET', rows, job, cmsgpack.pack(r))
      redis.call('ZADD', KEYS[3], now, #agent .. ':' .. agent .. job)
      n = n + 1
      out[#out + 1] = {1, d}
    else
      out[#out + 1] = {0, d}
    end
  else
    if not v then redis.call('ZREM', dagent, sid) end
    out[#out + 1] = {2, sid}
  end
  i = i + 1
end
if n > 0 then redis.call('PUBLISH', ARGV[2], now) end
return out
`)

// ListDead implements relay.DeadLetters: newest first (failed at, then
// schedule id, descending), across every shard when agentID is "". A cursor
// is bound to the filter it was issued for; limit <= 0 means 100.
func (e *deadLetters) ListDead(ctx context.Context, agentID, cursor string, limit int) ([]relay.DeadLetter, string, error) {
	pos, err := relay.DecodeCursor(relay.CursorDead, agentID, cursor)
	if err != nil {
		return nil, "", fmt.Errorf("redis: list dead: %w", err)
	}
	maxScore, after := "+inf", ""
	if pos != "" {
		at, sid, ok := strings.Cut(pos, ":")
		if _, err := strconv.ParseInt(at, 10, 64); !ok || err != nil || sid == "" {
			return nil, "", fmt.Errorf("redis: list dead: %w", relay.ErrInvalidCursor)
		}
		maxScore, after = at, sid
	}
	if limit <= 0 {
		limit = 100
	}
	type scope struct{ index, dead string }
	var scopes []scope
	if agentID != "" {
		s := e.k.shardOf(agentID)
		scopes = []scope{{e.k.deadOfAgent(s, agentID), e.k.dead(s)}}
	} else {
		for s := range e.k.shards {
			scopes = append(scopes, scope{e.k.deadByTime(s), e.k.dead(s)})
		}
	}
	var all []relay.DeadLetter
	for _, sc := range scopes {
		v, err := e.run(ctx, scriptListDead, []string{sc.index, sc.dead}, e.nowArg(), maxScore, after, limit+1)
		if err != nil {
			return nil, "", fmt.Errorf("redis: list dead: %w", err)
		}
		a, err := array(v)
		if err != nil {
			return nil, "", fmt.Errorf("redis: list dead: %w", err)
		}
		for _, x := range a {
			d, err := decodeDead(x)
			if err != nil {
				return nil, "", fmt.Errorf("redis: list dead: %w", err)
			}
			all = append(all, d)
		}
	}
	slices.SortFunc(all, func(a, b relay.DeadLetter) int {
		if c := b.FailedAt.Compare(a.FailedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ScheduleID, a.ScheduleID)
	})
	next := ""
	if len(all) > limit {
		all = all[:limit]
		last := all[limit-1]
		next = relay.EncodeCursor(relay.CursorDead, agentID, strconv.FormatInt(last.FailedAt.UnixMilli(), 10)+":"+last.ScheduleID)
	}
	return all, next, nil
}

// Replay implements relay.DeadLetters. Schedule ids do not name their shard,
// so every shard is first asked which of them it holds; an id no shard holds
// fails the replay before anything changes. An id another replay takes
// between that check and the replay is reported Missing.
func (e *deadLetters) Replay(ctx context.Context, scheduleIDs []string) (relay.ReplayResult, error) {
	ids := relay.UniqueIDs(scheduleIDs)
	found := make(map[string]bool, len(ids))
	byShard := make([][][2]string, e.k.shards)
	for chunk := range slices.Chunk(ids, replayBatch) {
		for s := range e.k.shards {
			args := []any{e.nowArg()}
			for _, id := range chunk {
				args = append(args, id)
			}
			v, err := e.run(ctx, scriptDeadAgents, []string{e.k.dead(s)}, args...)
			if err != nil {
				return relay.ReplayResult{}, fmt.Errorf("redis: replay: %w", err)
			}
			a, err := array(v)
			if err != nil || len(a)%2 != 0 {
				return relay.ReplayResult{}, fmt.Errorf("redis: replay: %w", errReply)
			}
			for i := 0; i < len(a); i += 2 {
				id, err1 := str(a[i])
				agent, err2 := str(a[i+1])
				if err1 != nil || err2 != nil {
					return relay.ReplayResult{}, fmt.Errorf("redis: replay: %w", errReply)
				}
				found[id] = true
				byShard[s] = append(byShard[s], [2]string{id, agent})
			}
		}
	}
	var unknown []string
	for _, id := range ids {
		if !found[id] {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return relay.ReplayResult{}, fmt.Errorf("redis: replay: %w", &relay.UnknownDeadLettersError{ScheduleIDs: unknown})
	}
	var res relay.ReplayResult
	for s, pairs := range byShard {
		for chunk := range slices.Chunk(pairs, replayBatch) {
			if err := e.replayShard(ctx, s, chunk, &res); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// ReplayAgent implements relay.DeadLetters. Ids of the agent's index that
// name no dead letter (left by an interrupted write) are only cleaned up.
func (e *deadLetters) ReplayAgent(ctx context.Context, agentID string) (relay.ReplayResult, error) {
	s := e.k.shardOf(agentID)
	var res relay.ReplayResult
	for {
		var ids []string
		err := e.retry(ctx, func(ctx context.Context) error {
			var err error
			ids, err = e.c.ZRange(ctx, e.k.deadOfAgent(s, agentID), 0, replayBatch-1).Result()
			return err
		})
		if err != nil {
			return res, fmt.Errorf("redis: replay agent: %w", err)
		}
		if len(ids) == 0 {
			res.Missing = nil
			return res, nil
		}
		pairs := make([][2]string, len(ids))
		for i, id := range ids {
			pairs[i] = [2]string{id, agentID}
		}
		if err := e.replayShard(ctx, s, pairs, &res); err != nil {
			res.Missing = nil
			return res, err
		}
	}
}

// replayShard replays (schedule id, agent) pairs of shard s in one script
// and adds what it did to res.
func (e *deadLetters) replayShard(ctx context.Context, s int, pairs [][2]string, res *relay.ReplayResult) error {
	keys := []string{e.k.dead(s), e.k.deadByTime(s), e.k.due(s)}
	args := []any{e.nowArg(), e.k.wake()}
	for _, p := range pairs {
		keys = append(keys, e.k.rows(s, p[1]), e.k.deadOfAgent(s, p[1]))
		args = append(args, p[0], p[1])
	}
	v, err := e.run(ctx, scriptReplay, keys, args...)
	if err != nil {
		return fmt.Errorf("redis: replay: %w", err)
	}
	a, err := array(v)
	if err != nil {
		return fmt.Errorf("redis: replay: %w", err)
	}
	for _, x := range a {
		pair, err := array(x)
		if err != nil || len(pair) != 2 {
			return fmt.Errorf("redis: replay: %w", errReply)
		}
		outcome, err := integer(pair[0])
		if err != nil {
			return fmt.Errorf("redis: replay: %w", err)
		}
		if outcome == 2 {
			id, err := str(pair[1])
			if err != nil {
				return fmt.Errorf("redis: replay: %w", err)
			}
			res.Missing = append(res.Missing, id)
			continue
		}
		d, err := decodeDead(pair[1])
		if err != nil {
			return fmt.Errorf("redis: replay: %w", err)
		}
		if outcome == 1 {
			res.Replayed = append(res.Replayed, d)
		} else {
			res.Dropped = append(res.Dropped, relay.DroppedDeadLetter{DeadLetter: d, Reason: relay.ReplayDropRearmed})
		}
	}
	return nil
}
