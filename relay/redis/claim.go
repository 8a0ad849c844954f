package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// peekFactor is how many candidates a claim looks at per lease it wants, so
// that dispatchers racing for the same head of a shard still find work.
const peekFactor = 2

// claimTries bounds how often a claim re-reads a shard whose candidates were
// all taken by other dispatchers in between.
const claimTries = 4

// reapBatch is how many expired leases one reap step handles.
const reapBatch = 256

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

// scriptClaim leases the candidates that are still due: ZMSCORE reads the
// candidates' due times (as many at a time as leases are still wanted, so
// an uncontended claim reads no more), one ZREM takes the due ones off,
// one INCRBY hands out the batch's fencing tokens (in candidate order) and
// one ZADD enters the leases.
//
// KEYS[1] due, KEYS[2] lease, KEYS[3] token counter, KEYS[4] the shard's
// stopped instances, KEYS[4+i] rows of the agent of candidate i
// ARGV[1] now, ARGV[2] lease ms, ARGV[3] max, ARGV[3+i] member of candidate i
//
// Returns {lease until ms, {i - 1, instance stopped (0|1), packed row}...}
// flattened, in candidate order: everything a delivery needs (the caller
// knows each candidate's member), so that a fire costs no read of its own.
var scriptClaim = script(`
local now = clock(ARGV[1])
local untilms = now + tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local gone, taken, jobs, rows, seen = {}, {}, {}, {}, {}
local from, n = 1, #ARGV - 3
-- Read the due times of as many candidates as leases are still wanted: the
-- rest are read only when others took some of these.
while from <= n and #taken < max do
  local to = math.min(n, from + max - #taken - 1, from + 999)
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, from + 3, to + 3))
  for k = 1, #scores do
    local i, s = from + k - 1, scores[k]
    local m = ARGV[i + 3]
    if s and tonumber(s) <= now and not seen[m] then
      seen[m] = true
      gone[#gone + 1] = m
      local _, job = split(m)
      local v = redis.call('HGET', KEYS[i + 4], job)
      if v then
        taken[#taken + 1] = i
        jobs[#jobs + 1] = job
        rows[#rows + 1] = cmsgpack.unpack(v)
      end
    end
  end
  from = to + 1
end
if #gone > 0 then chunked('ZREM', KEYS[1], gone, 1) end
local out = {untilms}
local count = #taken
if count == 0 then return out end
local anyStopped = redis.call('SCARD', KEYS[4]) > 0
local tok = redis.call('INCRBY', KEYS[3], count) - count
local leases = {}
for j = 1, count do
  local i, r = taken[j], rows[j]
  r[6] = r[6] + 1
  r[7] = tok + j
  local p = cmsgpack.pack(r)
  redis.call('HSET', KEYS[i + 4], jobs[j], p)
  leases[2 * j - 1] = untilms
  leases[2 * j] = ARGV[i + 3]
  local st = 0
  if anyStopped then st = redis.call('SISMEMBER', KEYS[4], r[2]) end
  out[3 * j - 1] = i - 1
  out[3 * j] = st
  out[3 * j + 1] = p
end
chunked('ZADD', KEYS[2], leases, 1)
return out
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

// Claim implements relay.Queue. One pipelined read finds the due heads of
// every shard; then the shards with due one-shots are claimed round-robin,
// starting at a different shard on every call, until there are max leases.
// Leases of one shard come in due order. When a step fails part way, the
// leases already taken are returned with the error.
//
// The read asks the first shard of the call for as many candidates as the
// claim may use, the others for a share of that: a burst is usually served
// by the first shard, and a shard whose share was not enough is read again.
func (e *Engine) Claim(ctx context.Context, max int, leaseFor time.Duration) ([]relay.Lease, error) {
	if max <= 0 {
		return nil, nil
	}
	leaseMs := durMs(leaseFor)
	start := int(e.rr.Add(1))
	full := max * peekFactor
	share := (full + e.k.shards - 1) / e.k.shards
	asked := func(s int) int {
		if s == start%e.k.shards {
			return full
		}
		return share
	}
	var heads []any
	if e.k.shards > 1 {
		now := e.nowArg()
		var err error
		heads, err = e.runShards(ctx, scriptPeek,
			func(s int) []string { return []string{e.k.due(s)} },
			func(s int) []any { return []any{now, asked(s), "due"} })
		if err != nil {
			return nil, fmt.Errorf("redis: claim: %w", err)
		}
	}
	var out []relay.Lease
	for i := range e.k.shards {
		s := (start + i) % e.k.shards
		var cands []any
		if heads != nil {
			c, err := array(heads[s])
			if err != nil {
				return out, fmt.Errorf("redis: claim: %w", err)
			}
			if len(c) == 0 {
				continue
			}
			cands = c
		}
		got, err := e.claimFrom(ctx, s, max-len(out), leaseMs, shardHead{cands, asked(s)})
		out = append(out, got...)
		if err != nil {
			return out, err // with the leases taken so far: they are the caller's
		}
		if len(out) >= max {
			break
		}
	}
	return out, nil
}

// shardHead is what a claim read of a shard's due head: the candidates
// (nil: not read) and how many it asked for.
type shardHead struct {
	cands []any
	asked int
}

// claimFrom leases up to want of shard s's due one-shots, starting with
// its head h, and reading the shard again while others took what it saw.
func (e *Engine) claimFrom(ctx context.Context, s, want int, leaseMs int64, h shardHead) ([]relay.Lease, error) {
	cands, asked := h.cands, h.asked
	var out []relay.Lease
	for try := 0; try < claimTries && len(out) < want; try++ {
		n := want - len(out)
		if len(cands) == asked && asked < n*peekFactor {
			cands = nil // the head saw less than this claim may take of a shard that holds more
		}
		if cands == nil || len(cands) > n*peekFactor {
			cands, asked = cands[:min(len(cands), n*peekFactor)], n*peekFactor
		}
		if len(cands) == 0 {
			cands = nil
		}
		got, peeked, err := e.claimShard(ctx, s, n, leaseMs, cands)
		cands = nil // later tries read the shard again
		out = append(out, got...)
		if err != nil {
			return out, err
		}
		// Stop on this shard when it has nothing due, or when the claim
		// got what it looked at (what is left is not due yet).
		if peeked == 0 || len(got) > 0 && peeked < asked {
			break
		}
	}
	return out, nil
}

// claimShard leases up to want of shard s's due candidates: cands when
// given (already peeked), else a fresh peek of want*peekFactor at the
// shard's due head. It returns the leases and how many candidates it saw.
func (e *Engine) claimShard(ctx context.Context, s, want int, leaseMs int64, cands []any) ([]relay.Lease, int, error) {
	now := e.nowArg()
	if cands == nil {
		v, err := e.run(ctx, scriptPeek, []string{e.k.due(s)}, now, want*peekFactor, "due")
		if err != nil {
			return nil, 0, fmt.Errorf("redis: claim: %w", err)
		}
		if cands, err = array(v); err != nil {
			return nil, 0, fmt.Errorf("redis: claim: %w", err)
		}
	}
	if len(cands) == 0 {
		return nil, 0, nil
	}
	keys := make([]string, 4, 4+len(cands))
	keys[0], keys[1], keys[2], keys[3] = e.k.due(s), e.k.lease(s), e.k.token(s), e.k.shardStopped(s)
	args := make([]any, 3, 3+len(cands))
	args[0], args[1], args[2] = now, leaseMs, want
	members := make([]string, 0, len(cands))
	for _, c := range cands {
		m, err := str(c)
		if err != nil {
			return nil, 0, fmt.Errorf("redis: claim: %w", err)
		}
		agent, _, ok := splitMember(m)
		if !ok {
			return nil, 0, fmt.Errorf("redis: claim: malformed due entry %q", m)
		}
		keys = append(keys, e.k.rows(s, agent))
		args = append(args, m)
		members = append(members, m)
	}
	v, err := e.run(ctx, scriptClaim, keys, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("redis: claim: %w", err)
	}
	out, err := decodeClaimed(v, members, time.Now())
	if err != nil {
		err = fmt.Errorf("redis: claim: %w", err)
	}
	return out, len(cands), err
}

// decodeClaimed reads a claim's {until ms, {candidate index, stopped,
// packed row}...} of the candidates members. Every lease in the reply is
// taken now: it hands over each one that decodes, even when another does
// not (that one lapses and the reaper returns it), with the error.
func decodeClaimed(v any, members []string, claimed time.Time) ([]relay.Lease, error) {
	f, err := array(v)
	if err != nil {
		return nil, err
	}
	if len(f) < 1 || (len(f)-1)%3 != 0 {
		return nil, fmt.Errorf("%w: claim reply of %d fields", errReply, len(f))
	}
	untilMs, err := integer(f[0])
	if err != nil {
		return nil, err
	}
	until := ms(untilMs)
	out := make([]relay.Lease, 0, (len(f)-1)/3)
	var bad error
	for i := 1; i < len(f); i += 3 {
		l, err := decodeClaimedLease(f[i], f[i+1], f[i+2], members)
		if err != nil {
			bad = err
			continue
		}
		l.Until, l.ClaimedAt = until, claimed
		out = append(out, l)
	}
	return out, bad
}

// decodeClaimedLease reads one lease of a claim reply: the index of its
// candidate in members, whether its instance is stopped and its packed row.
func decodeClaimedLease(idxV, stoppedV, packedV any, members []string) (relay.Lease, error) {
	idx, err := integer(idxV)
	if err != nil {
		return relay.Lease{}, err
	}
	if idx < 0 || idx >= int64(len(members)) {
		return relay.Lease{}, fmt.Errorf("%w: claimed candidate %d of %d", errReply, idx, len(members))
	}
	agent, job, _ := splitMember(members[idx])
	stopped, err := integer(stoppedV)
	if err != nil {
		return relay.Lease{}, err
	}
	packed, err := str(packedV)
	if err != nil {
		return relay.Lease{}, err
	}
	o, tok, err := decodePackedRow(agent, job, packed)
	if err != nil {
		return relay.Lease{}, err
	}
	return relay.Lease{OneShot: o, Token: tok, InstanceStopped: stopped == 1}, nil
}

// decodeLeaseFields reads a lease from its agent, job, until ms and row.
func decodeLeaseFields(agentV, jobV, untilV any, row []any) (relay.Lease, error) {
	if len(row) != rowFields && len(row) != rowFields+1 {
		return relay.Lease{}, fmt.Errorf("%w: lease row of %d fields", errReply, len(row))
	}
	agent, err := str(agentV)
	if err != nil {
		return relay.Lease{}, err
	}
	job, err := str(jobV)
	if err != nil {
		return relay.Lease{}, err
	}
	until, err := integer(untilV)
	if err != nil {
		return relay.Lease{}, err
	}
	o, err := decodeRow(agent, job, row)
	if err != nil {
		return relay.Lease{}, err
	}
	tok, err := rowToken(row)
	if err != nil {
		return relay.Lease{}, err
	}
	return relay.Lease{OneShot: o, Token: tok, Until: ms(until)}, nil
}

// NextDue implements relay.Queue: the earliest due entry over all shards
// (read in one pipeline), judged by Redis's clock.
func (e *Engine) NextDue(ctx context.Context) (time.Duration, bool, error) {
	now := e.nowArg()
	replies, err := e.runShards(ctx, scriptHead,
		func(s int) []string { return []string{e.k.due(s)} },
		func(int) []any { return []any{now} })
	if err != nil {
		return 0, false, fmt.Errorf("redis: next due: %w", err)
	}
	best := int64(-1)
	var redisNow time.Time
	for _, v := range replies {
		a, err := array(v)
		if err != nil || len(a) != 3 {
			return 0, false, fmt.Errorf("redis: next due: %w", errReply)
		}
		score, err1 := integer(a[0])
		sec, err2 := integer(a[1])
		usec, err3 := integer(a[2])
		if err1 != nil || err2 != nil || err3 != nil {
			return 0, false, fmt.Errorf("redis: next due: %w", errReply)
		}
		redisNow = time.Unix(sec, usec*1000)
		if score >= 0 && (best < 0 || score < best) {
			best = score
		}
	}
	if best < 0 {
		return 0, false, nil
	}
	if e.opts.Now != nil {
		redisNow = e.opts.Now()
	}
	return max(ms(best).Sub(redisNow), 0), true, nil
}

// Extend implements relay.Queue.
func (e *Engine) Extend(ctx context.Context, l relay.Lease, leaseFor time.Duration) (relay.Lease, error) {
	s := e.k.shardOf(l.AgentID)
	v, err := e.run(ctx, scriptExtend, []string{e.k.rows(s, l.AgentID), e.k.lease(s)},
		e.nowArg(), l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token, durMs(leaseFor))
	if err != nil {
		return relay.Lease{}, fmt.Errorf("redis: extend: %w", err)
	}
	f, err := array(v)
	if err != nil {
		return relay.Lease{}, fmt.Errorf("redis: extend: %w", err)
	}
	if len(f) == 0 {
		return relay.Lease{}, fmt.Errorf("redis: extend %s: %w", l.ScheduleID, relay.ErrLeaseLost)
	}
	out, err := decodeLeaseFields(l.AgentID, l.JobID, f[0], f[1:])
	if err != nil {
		return relay.Lease{}, fmt.Errorf("redis: extend: %w", err)
	}
	return out, nil
}

// Reap implements relay.Queue: expired leases (by Redis's clock) go back to
// armed, due now, announced on the wake channel.
func (e *Engine) Reap(ctx context.Context) (int, error) {
	total := 0
	for s := range e.k.shards {
		for {
			now := e.nowArg()
			v, err := e.run(ctx, scriptPeek, []string{e.k.lease(s)}, now, reapBatch, "expired")
			if err != nil {
				return total, fmt.Errorf("redis: reap: %w", err)
			}
			cands, err := array(v)
			if err != nil {
				return total, fmt.Errorf("redis: reap: %w", err)
			}
			if len(cands) == 0 {
				break
			}
			keys := []string{e.k.lease(s), e.k.due(s)}
			args := []any{now, e.k.wake()}
			for _, c := range cands {
				m, err := str(c)
				if err != nil {
					return total, fmt.Errorf("redis: reap: %w", err)
				}
				agent, _, ok := splitMember(m)
				if !ok {
					return total, fmt.Errorf("redis: reap: malformed lease entry %q", m)
				}
				keys = append(keys, e.k.rows(s, agent))
				args = append(args, m)
			}
			v, err = e.run(ctx, scriptReap, keys, args...)
			if err != nil {
				return total, fmt.Errorf("redis: reap: %w", err)
			}
			n, err := integer(v)
			if err != nil {
				return total, fmt.Errorf("redis: reap: %w", err)
			}
			total += int(n)
			if len(cands) < reapBatch {
				break
			}
		}
	}
	if total > 0 {
		e.notify()
	}
	return total, nil
}
