package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

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

// scriptStats counts a shard's entries.
//
// KEYS[1] due, KEYS[2] lease, KEYS[3] dead by time, KEYS[4] held agents,
// KEYS[5] probing agents
// ARGV[1] now
//
// Returns {armed entries, due entries, leased entries, dead letters,
// probing agents, {agent with held fires...}}.
var scriptStats = script(`
local now = clock(ARGV[1])
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCOUNT', KEYS[1], '-inf', now),
  redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]), redis.call('SCARD', KEYS[5]),
  redis.call('SMEMBERS', KEYS[4])}
`)

// Get implements relay.Armed. It reads the row with one HGET and decodes it
// here: Get is on the path of every delivery.
func (e *queue) Get(ctx context.Context, agentID, jobID string) (relay.OneShot, error) {
	s := e.k.shardOf(agentID)
	var packed []byte
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		packed, err = e.c.HGet(ctx, e.k.rows(s, agentID), jobID).Bytes()
		return err
	})
	if errors.Is(err, goredis.Nil) {
		return relay.OneShot{}, fmt.Errorf("redis: get %s/%s: %w", agentID, jobID, relay.ErrNotFound)
	}
	if err != nil {
		return relay.OneShot{}, fmt.Errorf("redis: get: %w", err)
	}
	f, err := unpackArray(packed)
	if err != nil {
		return relay.OneShot{}, fmt.Errorf("redis: get %s/%s: %w", agentID, jobID, err)
	}
	o, err := decodeRow(agentID, jobID, f)
	if err != nil {
		return relay.OneShot{}, fmt.Errorf("redis: get: %w", err)
	}
	return o, nil
}

// List implements relay.Armed. A cursor is bound to the agent it was issued
// for; limit <= 0 means 100.
func (e *queue) List(ctx context.Context, agentID, cursor string, limit int) ([]relay.OneShot, string, error) {
	after, err := relay.DecodeCursor(relay.CursorArmed, agentID, cursor)
	if err != nil {
		return nil, "", fmt.Errorf("redis: list: %w", err)
	}
	if limit <= 0 {
		limit = 100
	}
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptList, []string{e.k.rows(s, agentID)}, e.nowArg(), after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("redis: list: %w", err)
	}
	a, err := array(v)
	if err != nil || len(a)%2 != 1 {
		return nil, "", fmt.Errorf("redis: list: %w", errReply)
	}
	more, err := integer(a[0])
	if err != nil {
		return nil, "", fmt.Errorf("redis: list: %w", err)
	}
	items := make([]relay.OneShot, 0, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		job, err := str(a[i])
		if err != nil {
			return nil, "", fmt.Errorf("redis: list: %w", err)
		}
		f, err := array(a[i+1])
		if err != nil {
			return nil, "", fmt.Errorf("redis: list: %w", err)
		}
		o, err := decodeRow(agentID, job, f)
		if err != nil {
			return nil, "", fmt.Errorf("redis: list: %w", err)
		}
		items = append(items, o)
	}
	next := ""
	if more == 1 && len(items) > 0 {
		next = relay.EncodeCursor(relay.CursorArmed, agentID, items[len(items)-1].JobID)
	}
	return items, next, nil
}

// Stats implements the gauges of relay.Engine, summed over the shards: one
// pipeline counts every shard's entries, and, when some agents have held
// fires, another counts those.
func (e *queue) Stats(ctx context.Context) (relay.Stats, error) {
	now := e.nowArg()
	replies, err := e.runShards(ctx, scriptStats,
		func(s int) []string {
			return []string{e.k.due(s), e.k.lease(s), e.k.deadByTime(s), e.k.held(s), e.k.probing(s)}
		},
		func(int) []any { return []any{now} })
	if err != nil {
		return relay.Stats{}, fmt.Errorf("redis: stats: %w", err)
	}
	var st relay.Stats
	var heldKeys []string
	for s, v := range replies {
		a, err := array(v)
		if err != nil || len(a) != 6 {
			return relay.Stats{}, fmt.Errorf("redis: stats: %w", errReply)
		}
		var n [5]int64
		for i := range n {
			if n[i], err = integer(a[i]); err != nil {
				return relay.Stats{}, fmt.Errorf("redis: stats: %w", err)
			}
		}
		st.Armed += n[0] + n[2]
		st.Due += n[1]
		st.Leased += n[2]
		st.DeadLetter += n[3]
		st.Probing += n[4]
		agents, err := array(a[5])
		if err != nil {
			return relay.Stats{}, fmt.Errorf("redis: stats: %w", err)
		}
		for _, x := range agents {
			agent, err := str(x)
			if err != nil {
				return relay.Stats{}, fmt.Errorf("redis: stats: %w", err)
			}
			heldKeys = append(heldKeys, e.k.heldOf(s, agent))
		}
	}
	if len(heldKeys) > 0 {
		cmds := make([]*goredis.IntCmd, len(heldKeys))
		err := e.retry(ctx, func(ctx context.Context) error {
			_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for i, k := range heldKeys {
					cmds[i] = p.ZCard(ctx, k)
				}
				return nil
			})
			return err
		})
		if err != nil {
			return relay.Stats{}, fmt.Errorf("redis: stats: held fires: %w", err)
		}
		for _, c := range cmds {
			st.Held += c.Val()
		}
		st.Armed += st.Held // held fires are armed rows in neither zset
	}
	return st, nil
}
