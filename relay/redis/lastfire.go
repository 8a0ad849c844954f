package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

// A last fire record is a MessagePack array (cmsgpack) of
//
//	1 schedule id   2 instance id   3 callback url   4 fire_at ms (floor)
//	5 fire_at ns remainder   6 outcome   7 reason   8 outcome ms
//	9 reported (0 or 1)
//
// kept in the agent's last-fires hash and indexed by outcome time in the
// shard's lfz zset.

// scriptRecordLastFires writes records: those that concurrent callers made
// while the previous batch was in flight, in the order they were made.
//
// KEYS[1] the shard's last fire index, KEYS[1+i] last fires of the agent of
// record i
// ARGV[1] now (unused), then for record i the 4 values from ARGV[4i-2]:
// job, member, the packed record and its outcome ms
//
// The index entries go in one ZADD.
var scriptRecordLastFires = script(`
local index = {}
for i = 1, #KEYS - 1 do
  local b = 4 * i - 2
  redis.call('HSET', KEYS[1 + i], ARGV[b], ARGV[b + 2])
  index[2 * i - 1] = ARGV[b + 3]
  index[2 * i] = ARGV[b + 1]
end
if #index > 0 then chunked('ZADD', KEYS[1], index, 1) end
return #KEYS - 1
`)

// scriptForgetLastFire drops one record.
//
// KEYS[1] last fires of the agent, KEYS[2] the shard's last fire index
// ARGV[1] now (unused), ARGV[2] job, ARGV[3] member
var scriptForgetLastFire = script(`
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[3])
return 1
`)

// scriptJudgeLastFires judges records of one agent against its armed rows:
// a record whose job holds a one-shot of another schedule id (armed again
// since) or that is older than the expiry is dropped; the others are
// returned when they pass the filters.
//
// KEYS[1] last fires of the agent, KEYS[2] rows of the agent, KEYS[3] the
// shard's last fire index
// ARGV[1] now (unused), ARGV[2] agent, ARGV[3] expire before ms (0: none),
// ARGV[4] outcome at or before ms (-1: any), ARGV[5] "1": only jobs with no
// one-shot, ARGV[6] "1": mark returned records reported, ARGV[7...] the jobs
// to judge (none: every record of the agent)
//
// Returns {dropped, {job, record fields 1..8, unarmed 0|1, new 0|1}...}.
var scriptJudgeLastFires = script(`
local agent = ARGV[2]
local expire, before = tonumber(ARGV[3]), tonumber(ARGV[4])
local onlyUnarmed, mark = ARGV[5] == '1', ARGV[6] == '1'
local jobs = {}
if #ARGV > 6 then
  for i = 7, #ARGV do jobs[#jobs + 1] = ARGV[i] end
else
  jobs = redis.call('HKEYS', KEYS[1])
end
local out, dropped = {0}, 0
for _, job in ipairs(jobs) do
  local m = string.len(agent) .. ':' .. agent .. job
  local v = redis.call('HGET', KEYS[1], job)
  if not v then
    redis.call('ZREM', KEYS[3], m)
    dropped = dropped + 1
  else
    local r = cmsgpack.unpack(v)
    local row = redis.call('HGET', KEYS[2], job)
    local drop, unarmed = false, 0
    if expire > 0 and r[8] < expire then
      drop = true
    elseif row then
      drop = cmsgpack.unpack(row)[1] ~= r[1]
    else
      unarmed = 1
    end
    if drop then
      redis.call('HDEL', KEYS[1], job)
      redis.call('ZREM', KEYS[3], m)
      dropped = dropped + 1
    elseif (not onlyUnarmed or unarmed == 1) and (before < 0 or r[8] <= before) then
      local new = 0
      if mark and unarmed == 1 and r[9] == 0 then
        new = 1
        r[9] = 1
        redis.call('HSET', KEYS[1], job, cmsgpack.pack(r))
      end
      out[#out + 1] = {job, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], unarmed, new}
    end
  end
end
out[1] = dropped
return out
`)

// RecordLastFire implements relay.LastFires. Records are group-committed
// like acks (see groupCommit and queueOf): every delivered fire
// writes one, so a burst costs a few round trips, not one per fire.
func (e *fireRecords) RecordLastFire(ctx context.Context, f relay.LastFire) error {
	if err := checkLastFire(f); err != nil {
		return fmt.Errorf("redis: record last fire: %w", err)
	}
	if err := submit(ctx, e.lastFirer.get(e.queueOf(ctx, f.AgentID)), f, e.groupTimeout(), e.recordLastFires); err != nil {
		return fmt.Errorf("redis: record last fire: %w", err)
	}
	return nil
}

// checkLastFire refuses a record without its ids or outcome, or of a fire
// before 1970.
func checkLastFire(f relay.LastFire) error {
	if f.AgentID == "" || f.JobID == "" || f.ScheduleID == "" || f.Outcome == "" {
		return errors.New("agent id, job id, schedule id and outcome are required")
	}
	if f.FireAt.UnixNano() < 0 {
		return fmt.Errorf("fire_at %s before 1970", f.FireAt)
	}
	return nil
}

// recordLastFires writes one batch of last fire records, one script call
// per shard, all in one pipeline, and answers each caller.
func (e *fireRecords) recordLastFires(ctx context.Context, batch []*groupReq[relay.LastFire]) {
	shards, parts := byShard(batch, func(f relay.LastFire) int { return e.k.shardOf(f.AgentID) })
	calls := make([]scriptCall, len(shards))
	for i, s := range shards {
		part := parts[i]
		keys := make([]string, 1, 1+len(part))
		keys[0] = e.k.lastFireIndex(s)
		args := make([]any, 1, 1+4*len(part))
		args[0] = e.nowArg()
		var packed []byte // the records, back to back
		for _, r := range part {
			f := r.v
			keys = append(keys, e.k.lastFires(s, f.AgentID))
			from := len(packed)
			packed = packLastFire(packed, f)
			args = append(args, f.JobID, member(f.AgentID, f.JobID), packed[from:len(packed):len(packed)], f.At.UnixMilli())
		}
		calls[i] = scriptCall{keys: keys, args: args}
	}
	e.runEach(ctx, scriptRecordLastFires, calls, func(i int, _ any, err error) {
		for _, r := range parts[i] {
			r.done <- err
		}
	})
}

// ForgetLastFire implements relay.LastFires.
func (e *fireRecords) ForgetLastFire(ctx context.Context, agentID, jobID string) error {
	s := e.k.shardOf(agentID)
	if _, err := e.run(ctx, scriptForgetLastFire, []string{e.k.lastFires(s, agentID), e.k.lastFireIndex(s)},
		e.nowArg(), jobID, member(agentID, jobID)); err != nil {
		return fmt.Errorf("redis: forget last fire: %w", err)
	}
	return nil
}

// judgeArgs are the filters of one scriptJudgeLastFires call.
type judgeArgs struct {
	expire, before time.Time // zero: none
	onlyUnarmed    bool
	mark           bool
}

func (a judgeArgs) argv(e *core, agent string, jobs []string) []any {
	expire, before := int64(0), int64(-1)
	if !a.expire.IsZero() {
		expire = a.expire.UnixMilli()
	}
	if !a.before.IsZero() {
		before = a.before.UnixMilli()
	}
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	args := []any{e.nowArg(), agent, expire, before, flag(a.onlyUnarmed), flag(a.mark)}
	for _, j := range jobs {
		args = append(args, j)
	}
	return args
}

func (e *fireRecords) judgeKeys(agent string) []string {
	s := e.k.shardOf(agent)
	return []string{e.k.lastFires(s, agent), e.k.rows(s, agent), e.k.lastFireIndex(s)}
}

// decodeJudged turns a scriptJudgeLastFires reply of agent into records.
func decodeJudged(agent string, v any) (dropped int, out []relay.UnarmedFire, err error) {
	a, err := array(v)
	if err != nil || len(a) < 1 {
		return 0, nil, fmt.Errorf("%w: judged last fires", errReply)
	}
	n, err := integer(a[0])
	if err != nil {
		return 0, nil, err
	}
	for _, item := range a[1:] {
		f, err := array(item)
		if err != nil || len(f) != 11 {
			return 0, nil, fmt.Errorf("%w: last fire record", errReply)
		}
		var strs [6]string
		for i, idx := range []int{0, 1, 2, 3, 6, 7} {
			if strs[i], err = str(f[idx]); err != nil {
				return 0, nil, err
			}
		}
		var ints [4]int64
		for i, idx := range []int{4, 5, 8, 10} {
			if ints[i], err = integer(f[idx]); err != nil {
				return 0, nil, err
			}
		}
		out = append(out, relay.UnarmedFire{
			LastFire: relay.LastFire{
				AgentID: agent, JobID: strs[0], ScheduleID: strs[1], InstanceID: strs[2], CallbackURL: strs[3],
				FireAt:  ms(ints[0]).Add(time.Duration(ints[1])),
				Outcome: strs[4], Reason: strs[5], At: ms(ints[2]),
			},
			New: ints[3] == 1,
		})
	}
	return int(n), out, nil
}

// LastFiresOf implements relay.LastFires.
func (e *fireRecords) LastFiresOf(ctx context.Context, agentID string, expireBefore time.Time) ([]relay.LastFire, error) {
	v, err := e.run(ctx, scriptJudgeLastFires, e.judgeKeys(agentID), judgeArgs{expire: expireBefore}.argv(e.core, agentID, nil)...)
	if err != nil {
		return nil, fmt.Errorf("redis: last fires: %w", err)
	}
	_, items, err := decodeJudged(agentID, v)
	if err != nil {
		return nil, fmt.Errorf("redis: last fires: %w", err)
	}
	out := make([]relay.LastFire, 0, len(items))
	for _, u := range items {
		out = append(out, u.LastFire)
	}
	slices.SortFunc(out, func(a, b relay.LastFire) int { return cmp.Compare(a.JobID, b.JobID) })
	return out, nil
}

// unarmedBatch is how many index entries Unarmed judges per round trip.
const unarmedBatch = 500

// Unarmed implements relay.LastFires. One agent's records are judged in one
// script call; every agent's are found through each shard's index by
// outcome time, in batches, each batch judged with one script call per
// agent in one pipeline.
func (e *fireRecords) Unarmed(ctx context.Context, q relay.UnarmedQuery) ([]relay.UnarmedFire, bool, error) {
	if q.Max <= 0 {
		q.Max = 1000
	}
	args := judgeArgs{expire: q.ExpireBefore, before: q.Before, onlyUnarmed: true, mark: q.Mark}
	var all []relay.UnarmedFire
	if q.AgentID != "" {
		v, err := e.run(ctx, scriptJudgeLastFires, e.judgeKeys(q.AgentID), args.argv(e.core, q.AgentID, nil)...)
		if err != nil {
			return nil, false, fmt.Errorf("redis: unarmed: %w", err)
		}
		if _, all, err = decodeJudged(q.AgentID, v); err != nil {
			return nil, false, fmt.Errorf("redis: unarmed: %w", err)
		}
	} else {
		for s := range e.k.shards {
			found, err := e.unarmedOfShard(ctx, s, args, q.Max+1)
			if err != nil {
				return nil, false, err
			}
			all = append(all, found...)
		}
	}
	slices.SortFunc(all, func(a, b relay.UnarmedFire) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.AgentID, b.AgentID), cmp.Compare(a.JobID, b.JobID))
	})
	more := len(all) > q.Max
	if more {
		all = all[:q.Max]
	}
	return all, more, nil
}

// unarmedOfShard finds up to limit unarmed records of shard s.
func (e *fireRecords) unarmedOfShard(ctx context.Context, s int, args judgeArgs, limit int) ([]relay.UnarmedFire, error) {
	var out []relay.UnarmedFire
	offset := int64(0)
	for len(out) < limit {
		var members []string
		maxScore := "+inf"
		if !args.before.IsZero() {
			maxScore = strconv.FormatInt(args.before.UnixMilli(), 10)
		}
		err := e.retry(ctx, func(ctx context.Context) error {
			var err error
			members, err = e.c.ZRangeByScore(ctx, e.k.lastFireIndex(s), &goredis.ZRangeBy{
				Min: "-inf", Max: maxScore, Offset: offset, Count: unarmedBatch,
			}).Result()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("redis: unarmed: %w", err)
		}
		if len(members) == 0 {
			return out, nil
		}
		byAgent := map[string][]string{}
		var agents []string
		for _, m := range members {
			agent, job, ok := splitMember(m)
			if !ok {
				return nil, fmt.Errorf("redis: unarmed: %w: index member %q", errReply, m)
			}
			if _, seen := byAgent[agent]; !seen {
				agents = append(agents, agent)
			}
			byAgent[agent] = append(byAgent[agent], job)
		}
		var cmds []*goredis.Cmd
		err = e.retry(ctx, func(ctx context.Context) error {
			for try := 0; ; try++ {
				cmds = cmds[:0]
				_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
					for _, a := range agents {
						cmds = append(cmds, scriptJudgeLastFires.EvalSha(ctx, p, e.judgeKeys(a), args.argv(e.core, a, byAgent[a])...))
					}
					return nil
				})
				if err != nil && try == 0 && goredis.HasErrorPrefix(err, "NOSCRIPT") {
					if lerr := scriptJudgeLastFires.Load(ctx, e.c).Err(); lerr != nil {
						return lerr
					}
					continue
				}
				return err
			}
		})
		if err != nil {
			return nil, fmt.Errorf("redis: unarmed: %w", err)
		}
		dropped := 0
		for i, c := range cmds {
			n, items, err := decodeJudged(agents[i], c.Val())
			if err != nil {
				return nil, fmt.Errorf("redis: unarmed: %w", err)
			}
			dropped += n
			out = append(out, items...)
		}
		if len(members) < unarmedBatch {
			return out, nil
		}
		// Dropped entries left the index: the next batch starts that much
		// earlier.
		offset += int64(len(members) - dropped)
	}
	return out, nil
}
