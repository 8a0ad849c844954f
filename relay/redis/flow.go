package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

// Flow control (see relay.Flow) lives in the shard of each agent, beside
// its rows:
//
//   - its flow record (keys.agent), a hash of its policy (par, rate, dis:
//     "1"), the parallelism applied by the last claim that left it held
//     fires (ep, which release() gives room against), its Down hold (gate,
//     ms), its rate's next slot (tat, ms with a fraction), its probe
//     (probe: "1", fails) and its spreading phase; and the fx flag while it
//     has fires with a flexible window;
//   - its count of leases in flight, a field of the shard's hash
//     (keys.inFlight): the claim adds, every transition that ends a lease
//     (Ack, Nack, Down, Kill, Cancel, a re-arm, Reap) takes away, in the
//     script that adds or removes the lease, so the count is the agent's
//     members of the lease zset; an expired lease counts until Reap ends
//     it, and Reap recounts the hash from the lease zset now and then (the
//     safety net). One hash per shard, not one key per agent, lets a claim
//     or an ack batch read and write the counts of all its agents in two
//     calls;
//   - its held fires (keys.heldOf, job → due time): due fires a claim held
//     back, still armed rows, which claims lease from there, oldest first;
//   - its fires with a flexible window (keys.flexOf, job → fire_at), which
//     a claim that leases one of the agent's fires makes due now once their
//     window has opened;
//
// and the shard keeps the sets of agents with held fires (keys.held), with
// held fires and room for them (keys.ready, by the due time of their
// earliest held fire), with a gate not yet passed (keys.gated, by gate),
// probing (keys.probing) and with a policy of their own (keys.policies).
//
// Held fires stay in their agent's held zset until a claim leases them
// from there. The prelude's release() makes an agent with room ready
// (and one without room not): after any of the agent's leases ends (Ack,
// Nack, Down, Kill, Cancel, a re-arm, Reap), on SetAgentPolicy, and at
// every Reap for every agent with held fires (the safety net). A claim
// serves the ready agents it peeks, and those whose gate passed, first:
// each gets as many of its held fires, oldest first, as its room and the
// claim's max allow; and an agent met through a due candidate gets its
// held fires before that candidate. So an agent's fires still go out in
// due order, and a held fire leaves its held zset leased (or cancelled, or
// re-armed), never back to the due zset to be peeked and claimed again.
// The claim then keeps the sets
// in step: an agent left with held fires and no room leaves the ready zset
// (the end of one of its leases brings it back), one left with none leaves
// every set.

// releaseBatch is how many agents one release script takes.
const releaseBatch = 256

// scriptRelease makes the agents whose room lets their held fires out
// ready (see release() in the prelude).
//
// KEYS[1] ready agents, KEYS[2] held agents, KEYS[3] gated agents, then for
// agent j: KEYS[1+3j] flow record, KEYS[2+3j] in-flight counts (the
// shard's), KEYS[3+3j] held
// ARGV[1] now, ARGV[2] wake channel, ARGV[2+j] agent j
//
// Returns how many held fires may go out; when any, they are announced on
// the wake channel.
var scriptRelease = script(`
local now = clock(ARGV[1])
local n = 0
local st = sets(KEYS[1], KEYS[2], KEYS[3])
for j = 1, #ARGV - 2 do
  local b = 3 * j
  n = n + release(now, ARGV[2 + j], KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], st)
end
flush(st)
if n > 0 then redis.call('PUBLISH', ARGV[2], now) end
return n
`)

// scriptSetPolicy stores an agent's policy and makes the agent ready when
// it no longer holds its held fires back (release()).
//
// KEYS[1] flow record, KEYS[2] in-flight counts, KEYS[3] held, KEYS[4] ready
// agents, KEYS[5] held agents, KEYS[6] gated agents, KEYS[7] agents with a
// policy
// ARGV[1] now, ARGV[2] wake channel, ARGV[3] agent, ARGV[4] parallelism,
// ARGV[5] rate, ARGV[6] disabled ("1" | "0")
//
// Returns how many held fires may go out; when any, they are announced on
// the wake channel.
var scriptSetPolicy = script(`
local now = clock(ARGV[1])
local agent, par, rate, dis = ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6] == '1'
-- The room release() gives: the agent's own parallelism, or, without one,
-- none (the next claim holds again what its flow does not allow).
if par > 0 then
  redis.call('HSET', KEYS[1], 'par', par, 'ep', par)
else
  redis.call('HDEL', KEYS[1], 'par', 'ep')
end
if tonumber(rate) > 0 then redis.call('HSET', KEYS[1], 'rate', rate) else redis.call('HDEL', KEYS[1], 'rate') end
if dis then redis.call('HSET', KEYS[1], 'dis', '1') else redis.call('HDEL', KEYS[1], 'dis') end
if par > 0 or tonumber(rate) > 0 or dis then
  redis.call('SADD', KEYS[7], agent)
else
  redis.call('SREM', KEYS[7], agent)
end
local b = sets(KEYS[4], KEYS[5], KEYS[6])
local n = release(now, agent, KEYS[1], KEYS[2], KEYS[3], b)
flush(b)
if n > 0 then redis.call('PUBLISH', ARGV[2], now) end
return n
`)

// scriptAgentFlow reads an agent's flow state.
//
// KEYS[1] flow record, KEYS[2] in-flight counts, KEYS[3] held
// ARGV[1] now, ARGV[2] agent
//
// Returns {par, rate, dis, probe, fails, gate, tat ("" for each not set),
// leases in flight, held fires, now ms}.
var scriptAgentFlow = script(`
local now = clock(ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'par', 'rate', 'dis', 'probe', 'fails', 'gate', 'tat')
local out = {}
for i = 1, 7 do out[i] = f[i] or '' end
out[8] = leasesOf(KEYS[2], ARGV[2])
out[9] = redis.call('ZCARD', KEYS[3])
out[10] = now
return out
`)

// scriptPhase sets an agent's phase unless it has one.
//
// KEYS[1] flow record
// ARGV[1] now (unused), ARGV[2] the phase to set
//
// Returns the agent's phase.
var scriptPhase = script(`
redis.call('HSETNX', KEYS[1], 'phase', ARGV[2])
return redis.call('HGET', KEYS[1], 'phase')
`)

var _ relay.Flows = (*Engine)(nil)

// releaseHeld runs release() for agents of shard s with held fires (the
// safety net of Reap). It returns how many held fires may go out.
func (e *core) releaseHeld(ctx context.Context, s int, agents []any) (int, error) {
	total := 0
	for chunk := range slices.Chunk(agents, releaseBatch) {
		keys := []string{e.k.ready(s), e.k.held(s), e.k.gated(s)}
		args := []any{e.nowArg(), e.k.wake()}
		for _, x := range chunk {
			a, err := str(x)
			if err != nil {
				return total, fmt.Errorf("release held fires: %w", err)
			}
			fk := e.k.flowKeys(s, a)
			keys = append(keys, fk[:]...)
			args = append(args, a)
		}
		v, err := e.run(ctx, scriptRelease, keys, args...)
		if err != nil {
			return total, fmt.Errorf("release held fires: %w", err)
		}
		n, err := integer(v)
		if err != nil {
			return total, fmt.Errorf("release held fires: %w", err)
		}
		total += int(n)
	}
	return total, nil
}

// SetAgentPolicy implements relay.Flows: one script stores the policy in
// the agent's flow record and, when it no longer holds the agent's held
// fires back, makes the agent ready, announced on the wake channel.
func (e *flowControl) SetAgentPolicy(ctx context.Context, agentID string, p relay.AgentPolicy) error {
	if agentID == "" {
		return fmt.Errorf("redis: set agent policy: empty agent id: %w", relay.ErrInvalidPolicy)
	}
	if err := p.Check(); err != nil {
		return fmt.Errorf("redis: set agent policy of %s: %w: %w", agentID, relay.ErrInvalidPolicy, err)
	}
	s := e.k.shardOf(agentID)
	fk := e.k.flowKeys(s, agentID)
	dis := "0"
	if p.Disabled {
		dis = "1"
	}
	v, err := e.run(ctx, scriptSetPolicy,
		[]string{fk[0], fk[1], fk[2], e.k.ready(s), e.k.held(s), e.k.gated(s), e.k.policies(s)},
		e.nowArg(), e.k.wake(), agentID, p.Parallelism, rateArg(p.Rate), dis)
	if err != nil {
		return fmt.Errorf("redis: set agent policy: %w", err)
	}
	if n, _ := integer(v); n > 0 {
		e.notify()
	}
	return nil
}

// AgentFlow implements relay.Flows.
func (e *flowControl) AgentFlow(ctx context.Context, agentID string) (relay.AgentFlow, error) {
	s := e.k.shardOf(agentID)
	c := e.agentFlowCall(s, agentID)
	v, err := e.run(ctx, scriptAgentFlow, c.keys, c.args...)
	if err != nil {
		return relay.AgentFlow{}, fmt.Errorf("redis: agent flow: %w", err)
	}
	f, err := decodeAgentFlow(agentID, v)
	if err != nil {
		return relay.AgentFlow{}, fmt.Errorf("redis: agent flow of %s: %w", agentID, err)
	}
	return f, nil
}

// agentFlowCall is the scriptAgentFlow call of agentID in shard s.
func (e *flowControl) agentFlowCall(s int, agentID string) scriptCall {
	fk := e.k.flowKeys(s, agentID)
	return scriptCall{keys: fk[:], args: []any{e.nowArg(), agentID}}
}

// AgentFlows implements relay.Flows: one pipeline reads which agents each
// shard knows a policy, held fires or a probe of, another their states.
func (e *flowControl) AgentFlows(ctx context.Context) ([]relay.AgentFlow, error) {
	type agentAt struct {
		id    string
		shard int
	}
	var agents []agentAt
	err := e.retry(ctx, func(ctx context.Context) error {
		agents = agents[:0]
		cmds := make([]*goredis.StringSliceCmd, e.k.shards)
		_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for s := range e.k.shards {
				cmds[s] = p.SUnion(ctx, e.k.policies(s), e.k.held(s), e.k.probing(s))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for s, c := range cmds {
			for _, id := range c.Val() {
				agents = append(agents, agentAt{id, s})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: agent flows: %w", err)
	}
	slices.SortFunc(agents, func(a, b agentAt) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	out := make([]relay.AgentFlow, 0, len(agents))
	for chunk := range slices.Chunk(agents, releaseBatch) {
		calls := make([]scriptCall, len(chunk))
		for i, a := range chunk {
			calls[i] = e.agentFlowCall(a.shard, a.id)
		}
		var bad error
		e.runEach(ctx, scriptAgentFlow, calls, func(i int, v any, err error) {
			if err != nil {
				bad = errors.Join(bad, err)
				return
			}
			f, err := decodeAgentFlow(chunk[i].id, v)
			if err != nil {
				bad = errors.Join(bad, err)
				return
			}
			// The sets may name an agent that has nothing left to report.
			if f.Policy != (relay.AgentPolicy{}) || f.Held > 0 || f.Probing {
				out = append(out, f)
			}
		})
		if bad != nil {
			return nil, fmt.Errorf("redis: agent flows: %w", bad)
		}
	}
	return out, nil
}

// decodeAgentFlow reads scriptAgentFlow's reply for agentID.
func decodeAgentFlow(agentID string, v any) (relay.AgentFlow, error) {
	a, err := array(v)
	if err != nil || len(a) != 10 {
		return relay.AgentFlow{}, fmt.Errorf("%w: agent flow", errReply)
	}
	var f [7]string
	for i := range f {
		if f[i], err = str(a[i]); err != nil {
			return relay.AgentFlow{}, err
		}
	}
	inFlight, err1 := integer(a[7])
	held, err2 := integer(a[8])
	now, err3 := integer(a[9])
	if err := errors.Join(err1, err2, err3); err != nil {
		return relay.AgentFlow{}, err
	}
	num := func(s string) (float64, error) {
		if s == "" {
			return 0, nil
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: agent flow field %q", errReply, s)
		}
		return x, nil
	}
	var n [5]float64 // par, rate, fails, gate, tat
	for i, s := range []string{f[0], f[1], f[4], f[5], f[6]} {
		if n[i], err = num(s); err != nil {
			return relay.AgentFlow{}, err
		}
	}
	out := relay.AgentFlow{
		AgentID: agentID,
		Policy: relay.AgentPolicy{
			Parallelism: int(n[0]),
			Rate:        n[1],
			Disabled:    f[2] == "1",
		},
		InFlight: int(inFlight),
		Held:     int(held),
		Probing:  f[3] == "1",
		Failures: int(n[2]),
	}
	if g := int64(math.Max(n[3], math.Ceil(n[4]))); g > now {
		out.GateUntil = ms(g)
	}
	return out, nil
}

// AgentPhase implements relay.Flows. The phase is kept in the agent's flow
// record: the first use reads it there (one round trip), and only an agent
// without one takes the next number of the store-wide counter and sets it
// unless another process did first (two more); the engine remembers it
// after that.
func (e *flowControl) AgentPhase(ctx context.Context, agentID string) (float64, error) {
	if v, ok := e.phases.Load(agentID); ok {
		return v.(float64), nil
	}
	key := e.k.agent(e.k.shardOf(agentID), agentID)
	var got string
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		got, err = e.c.HGet(ctx, key, "phase").Result()
		if errors.Is(err, goredis.Nil) {
			got, err = "", nil
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("redis: agent phase: %w", err)
	}
	if got == "" {
		var n int64
		err := e.retry(ctx, func(ctx context.Context) error {
			var err error
			n, err = e.c.Incr(ctx, e.k.phase()).Result()
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("redis: agent phase: %w", err)
		}
		phase := relay.VanDerCorput(uint64(max(n, 1)))
		v, err := e.run(ctx, scriptPhase, []string{key}, e.nowArg(), strconv.FormatFloat(phase, 'g', -1, 64))
		if err == nil {
			got, err = str(v)
		}
		if err != nil {
			return 0, fmt.Errorf("redis: agent phase: %w", err)
		}
	}
	phase, err := strconv.ParseFloat(got, 64)
	if err != nil || phase < 0 || phase >= 1 {
		return 0, fmt.Errorf("redis: agent phase of %s: %q: %w", agentID, got, errReply)
	}
	e.phases.Store(agentID, phase)
	return phase, nil
}
