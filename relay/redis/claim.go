package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// peekFactor is how many candidates a claim looks at per lease it wants, so
// that dispatchers racing for the same head of a shard still find work.
const peekFactor = 2

// claimTries bounds how often a claim re-reads a shard whose candidates were
// all taken by other dispatchers in between.
const claimTries = 4

// claimWork bounds how often a claim reads a shard at all: a claim whose
// candidates were held back by flow control reads on past them (asking for
// more each time, up to maxPeek), so that an agent with a long backlog at
// the head of the queue hides others' due fires for a few claims at most.
const claimWork = 16

// maxPeek bounds the candidates of one claim script.
const maxPeek = 4096

// maxAgentPeek bounds the agents whose held fires one claim serves.
const maxAgentPeek = 1024

// agentsFor is how many agents whose held fires may go out (ready, or
// whose gate passed) a claim of want leases peeks: each gives at least one
// lease when its room is still there, and a claim that needs more reads
// again.
func agentsFor(want int) int { return min(max(want, 1), maxAgentPeek) }

// scriptPeekDue lists a claim's candidates without changing anything: due
// entries, and the agents whose held fires may go out: ready agents (by the
// due time of their earliest held fire) and agents whose gate has passed.
// The claim that follows re-checks each one.
//
// KEYS[1] due, KEYS[2] gated, KEYS[3] ready
// ARGV[1] now, ARGV[2] count, ARGV[3] count of agents
//
// Returns {{member...}, {agent...}, more}: the members in score order; up
// to the count of agents, those whose gate passed (by gate), then ready
// ones (by the due time of their earliest held fire); more = 1 when there
// may be more agents than that.
var scriptPeekDue = script(`
local now = clock(ARGV[1])
local c = tonumber(ARGV[3])
local agents = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, c)
local more = 0
if #agents >= c then
  more = 1
else
  local ready = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, c - #agents)
  if #ready >= c - #agents then more = 1 end
  if #agents == 0 then
    agents = ready
  else
    local seen = {}
    for _, a in ipairs(agents) do seen[a] = true end
    for _, a in ipairs(ready) do
      if not seen[a] then agents[#agents + 1] = a end
    end
  end
end
return {redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2])), agents, more}
`)

// scriptClaim leases, under flow control (see flow.go), the held fires of
// the agents whose room freed, then the candidates that are still due.
//
// Each agent is read once per claim, when it is first met (one EXISTS over
// every agent's flow record comes first: when none has one, the rule, none
// is read and each gets the claim's flow): its policy, over
// the claim's flow, gives its room (nothing while disabled or before its
// gate; 1 while probing; its parallelism less its unexpired leases,
// counting those the claim takes). An agent with room gets its held fires
// first, leased straight from its held zset, oldest first (one ZPOPMIN of
// as many as it may take), as far as its room and the claim's max allow:
// the first agents given (ready agents, whose room freed since their fires
// were held, and agents whose gate passed) before any candidate, any other
// when the claim first meets one of its candidates. A candidate of an
// agent without room, or with held fires still waiting, is held: moved to
// the agent's held zset with its due time. Held fires and candidates are
// leased alike: ZMSCORE reads the candidates' due times (about as many at
// a time as leases are still wanted, so an uncontended claim reads little
// more), one ZREM takes the due ones off, one INCRBY hands out the batch's
// fencing tokens (in lease order) and one ZADD enters the leases; a lease
// under a rate moves the agent's rate slot on.
//
// Then the agents' leases are counted in the shard's in-flight counts (one
// HMGET and one HSET for them all), and, for each agent: its fires whose
// flexible window has opened are made due now (when it got a lease),
// and the shard's sets follow its held fires: an agent left with none
// leaves the held set and the ready and gated zsets; one with some joins
// the held set, stays ready when only the claim's max stopped it (with the
// due time of its earliest), else leaves the ready zset (release() brings
// it back when room frees) and is in the gated zset while its gate has not
// passed.
//
// KEYS[1] due, KEYS[2] lease, KEYS[3] token counter, KEYS[4] the shard's
// stopped instances, KEYS[5] held agents, KEYS[6] gated agents, KEYS[7]
// ready agents, KEYS[8] in-flight counts, then for agent j: KEYS[5+4j]
// rows, KEYS[6+4j] flow record, KEYS[7+4j] held, KEYS[8+4j] flexible fires
// ARGV[1] now, ARGV[2] lease ms, ARGV[3] max, ARGV[4] the flow's
// parallelism, ARGV[5] the flow's rate, ARGV[6] agent count na, ARGV[7] the
// count ng of the first agents, those ready or whose gate passed,
// ARGV[7+j] agent j, ARGV[8+na...] candidate members
//
// Returns {lease until ms, held, made due now (pulled forward),
// {agent j, job, instance stopped (0|1), packed row, agent failures}...}
// flattened, leases in the order taken: everything a delivery needs, so
// that a fire costs no read of its own.
var scriptClaim = script(`
local now = clock(ARGV[1])
local untilms = now + tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local fpar, frate = tonumber(ARGV[4]), tonumber(ARGV[5])
local na, ng = tonumber(ARGV[6]), tonumber(ARGV[7])
local due, heldSet, gated, ready, inf = KEYS[1], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local byId, ags, order = {}, {}, {}
for j = 1, na do byId[ARGV[7 + j]] = j end
local taken, gone = {}, {}
-- counts holds every agent's leases in flight, read with one HMGET when
-- the first agent is loaded.
local counts = nil
local held, anyHeld = 0, nil -- anyHeld: agent -> true when it holds fires
-- room is how many more fires of agent a may be leased (math.huge:
-- unbounded).
local function room(a)
  if a.dis or a.gate > now then return 0 end
  if a.probe then return 1 - a.inflight end
  if a.par <= 0 then return math.huge end
  return a.par - a.inflight
end
-- plain: no agent of the claim has a flow record (nil: not known yet).
local plain, none = nil, {false, false, false, false, false, false, false, false, false}
local function load(j)
  local a = ags[j]
  if a then return a end
  local b = 4 + 4 * j
  a = {j = j, id = ARGV[7 + j], rows = KEYS[b + 1], ag = KEYS[b + 2], hd = KEYS[b + 3],
    fx = KEYS[b + 4], leased = 0, holds = {}}
  ags[j] = a
  order[#order + 1] = a
  if plain == nil then
    -- One EXISTS over every agent's flow record: a claim whose agents
    -- have none (the rule) reads no record.
    local n = 0
    for i = 1, na, 1000 do
      local ks = {}
      for k = i, math.min(i + 999, na) do ks[#ks + 1] = KEYS[6 + 4 * k] end
      n = n + redis.call('EXISTS', unpack(ks))
    end
    plain = n == 0
  end
  local f = none
  if not plain then
    f = redis.call('HMGET', a.ag, 'par', 'rate', 'dis', 'ep', 'gate', 'tat', 'probe', 'fails', 'fx')
  end
  a.par = tonumber(f[1]) or 0
  if a.par <= 0 then a.par = fpar end
  a.rate = tonumber(f[2]) or 0
  if a.rate <= 0 then a.rate = frate end
  a.dis = f[3] == '1'
  a.ep = tonumber(f[4]) or 0
  a.gate = tonumber(f[5]) or 0
  a.tat = tonumber(f[6]) or 0
  -- Only an agent with a gate or a rate slot can be in the gated zset.
  a.mayGate = f[5] or f[6]
  if a.rate > 0 then a.gate = math.max(a.gate, math.ceil(a.tat)) end
  a.probe = f[7] == '1'
  a.fails = tonumber(f[8]) or 0
  a.flex = f[9] == '1'
  if not counts then
    counts = {}
    for i = 1, na, 1000 do
      local to = math.min(i + 999, na)
      local c = redis.call('HMGET', inf, unpack(ARGV, 7 + i, 7 + to))
      for k = i, to do counts[k] = tonumber(c[k - i + 1]) or 0 end
    end
  end
  a.inflight = counts[j]
  return a
end
local function lease(a, job, v)
  taken[#taken + 1] = {a, job, cmsgpack.unpack(v)}
  a.inflight = a.inflight + 1
  if a.rate > 0 then
    a.tat = math.max(a.tat, now) + 1000 / a.rate
    a.gate = math.max(a.gate, math.ceil(a.tat))
    a.tatSet = true
  end
end
-- serve leases agent a's held fires, oldest first, as far as its room and
-- the claim's max allow (one under a rate: each lease moves its gate past
-- now): it pops them (ZPOPMIN) once per claim, and notes whether some
-- may be left (a.more: it took all it asked for). A held fire without a
-- row (which no script leaves) just goes.
local function serve(a)
  a.checked = true
  if not a.listed then
    -- An agent met through its candidates: look only when it is in the
    -- held set (one SMISMEMBER asks for every agent of the claim at once).
    if anyHeld == nil then
      local names = {}
      for j = ng + 1, na do names[#names + 1] = ARGV[7 + j] end
      anyHeld = inSet(heldSet, names)
    end
    if not anyHeld[a.id] then return end
  end
  local k = math.min(room(a), max - #taken)
  if a.rate > 0 then k = math.min(k, 1) end
  if k <= 0 then return end
  local page = redis.call('ZPOPMIN', a.hd, k)
  a.had = #page > 0
  a.more = #page == 2 * k
  for i = 1, #page, 2 do
    local v = redis.call('HGET', a.rows, page[i])
    if v then lease(a, page[i], v) end
  end
end
local function pull(a)
  local pre = #a.id .. ':' .. a.id
  local n = 0
  for _, job in ipairs(redis.call('ZRANGEBYSCORE', a.fx, '-inf', now)) do
    local m = pre .. job
    local s = redis.call('ZSCORE', due, m)
    if not s then
      redis.call('ZREM', a.fx, job)
    elseif tonumber(s) > now then
      redis.call('ZADD', due, now, m)
      local v = redis.call('HGET', a.rows, job)
      if v then
        local r = cmsgpack.unpack(v)
        r[8] = now - r[3]
        redis.call('HSET', a.rows, job, cmsgpack.pack(r))
      end
      n = n + 1
    end
  end
  if redis.call('EXISTS', a.fx) == 0 then redis.call('HDEL', a.ag, 'fx') end
  return n
end
-- settle keeps the held set, the ready and the gated zsets (through the
-- sets st) in step with agent a's held fires, after the claim (its leases
-- counted).
local st = sets(ready, heldSet, gated)
-- forget takes agent a, which holds no fire any more, out of the held set
-- and the ready zset (and the gated zset, where it may be), as far as it
-- can be in them.
local function forget(a)
  if a.had or a.listed then
    push(st.unhold, a.id)
    push(st.unrdy, a.id)
    if a.listed and a.mayGate then push(st.ungate, a.id) end
  end
end
local function settle(a)
  local nh = #a.holds
  -- Some are left, or may be (then a later release() finds out).
  local left = a.more or nh > 0
  -- release() gives held fires room by the parallelism the last claim
  -- that left some applied: written only then, so that an agent that
  -- never waits costs no write (and no record) for it.
  if left and a.ep ~= a.par then redis.call('HSET', a.ag, 'ep', a.par) end
  if a.checked and not left then
    forget(a)
    return
  end
  if not left and not a.listed then return end
  if nh > 0 then push(st.hold, a.id) end
  if left and room(a) > 0 then
    -- Only the claim's max stopped it: it stays ready, by its earliest
    -- held fire left, if any.
    local h = redis.call('ZRANGE', a.hd, 0, 0, 'WITHSCORES')
    if h[2] then
      push(st.rdy, h[2], a.id)
      if a.listed and a.mayGate then push(st.ungate, a.id) end
      return
    end
    forget(a)
    return
  end
  if a.had or a.listed then push(st.unrdy, a.id) end
  if not a.dis and a.gate > now then
    push(st.gate, a.gate, a.id)
  elseif a.listed and a.mayGate then
    push(st.ungate, a.id)
  end
end
for j = 1, ng do
  if #taken >= max then break end
  local a = load(j)
  a.listed = true
  if room(a) > 0 then serve(a) end
end
local seen = {}
local from, n = 8 + na, #ARGV
while from <= n and #taken < max do
  local to = math.min(n, from + math.max(max - #taken, 32) - 1, from + 999)
  local scores = redis.call('ZMSCORE', due, unpack(ARGV, from, to))
  for k = 1, #scores do
    if #taken >= max then break end
    local m, s = ARGV[from + k - 1], scores[k]
    if s and tonumber(s) <= now and not seen[m] then
      seen[m] = true
      local agent, job = split(m)
      local a = load(byId[agent])
      if not a.checked and room(a) > 0 then serve(a) end
      -- Its held fires may have taken the claim's last places: the
      -- candidate then stays due.
      if #taken >= max then break end
      gone[#gone + 1] = m
      if not a.more and room(a) > 0 then
        local v = redis.call('HGET', a.rows, job)
        if v then lease(a, job, v) end
      else
        -- Held without reading its row: a due entry without one (which
        -- no script leaves) comes back with the others and goes when a
        -- claim with room meets it.
        a.holds[#a.holds + 1] = s
        a.holds[#a.holds + 1] = job
        held = held + 1
      end
    end
  end
  from = to + 1
end
if #gone > 0 then chunked('ZREM', due, gone, 1) end
local out = {untilms, held, 0}
local count = #taken
if count > 0 then
  local anyStopped = redis.call('SCARD', KEYS[4]) > 0
  local tok = redis.call('INCRBY', KEYS[3], count) - count
  local leases = {}
  for i = 1, count do
    local a, job, r = taken[i][1], taken[i][2], taken[i][3]
    r[6] = r[6] + 1
    r[7] = tok + i
    local p = cmsgpack.pack(r)
    redis.call('HSET', a.rows, job, p)
    leases[2 * i - 1] = untilms
    leases[2 * i] = #a.id .. ':' .. a.id .. job
    a.leased = a.leased + 1
    local st = 0
    if anyStopped then st = redis.call('SISMEMBER', KEYS[4], r[2]) end
    local o = #out
    out[o + 1] = a.j
    out[o + 2] = job
    out[o + 3] = st
    out[o + 4] = p
    out[o + 5] = a.fails
  end
  chunked('ZADD', KEYS[2], leases, 1)
end
local moved = 0
local names, by = {}, {}
for _, a in ipairs(order) do
  if a.leased > 0 then
    names[#names + 1] = a.id
    by[#by + 1] = a.leased
  end
end
bump(inf, names, by)
for _, a in ipairs(order) do
  if a.tatSet then redis.call('HSET', a.ag, 'tat', string.format('%.3f', a.tat)) end
  if a.leased > 0 and a.flex then moved = moved + pull(a) end
  if #a.holds > 0 then
    -- Latest first: each then goes in at the head of the agent's (small,
    -- listpack) held zset, with no scan past those it already went past.
    local rev, h = {}, a.holds
    for i = #h - 1, 1, -2 do
      rev[#rev + 1] = h[i]
      rev[#rev + 1] = h[i + 1]
    end
    chunked('ZADD', a.hd, rev, 1)
  end
  settle(a)
end
flush(st)
out[3] = moved
return out
`)

// Claim implements relay.Queue. One pipelined read finds the due heads of
// every shard; then the shards with due one-shots (or agents whose held
// fires may go out) are claimed round-robin, starting at a different shard
// on every call, until there are max leases. Leases of one shard come in
// due order, but for agents' held fires, which go before their due ones
// (and, for ready agents, before any other). When a step fails part way,
// the leases already taken are returned with the error.
//
// A shard whose master does not answer the read is left out of the call,
// so that the shards of the masters that are up go on being claimed.
//
// The read asks the first shard of the call for as many candidates as the
// claim may use, the others for a share of that: a burst is usually served
// by the first shard, and a shard whose share was not enough is read again.
func (e *queue) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	if max <= 0 {
		return nil, nil
	}
	if err := (relay.AgentPolicy{Parallelism: flow.Parallelism, Rate: flow.Rate}).Check(); err != nil {
		return nil, fmt.Errorf("redis: claim: flow: %w", err)
	}
	start := int(e.rr.Add(1))
	full := min(max*peekFactor, maxPeek)
	share := (full + e.k.shards - 1) / e.k.shards
	asked := func(s int) int {
		if s == start%e.k.shards {
			return full
		}
		return share
	}
	var heads []any
	var down []error
	if e.k.shards > 1 {
		now := e.nowArg()
		var err error
		heads, down, err = e.peekShards(ctx, scriptPeekDue,
			func(s int) []string { return []string{e.k.due(s), e.k.gated(s), e.k.ready(s)} },
			func(s int) []any { return []any{now, asked(s), agentsFor(asked(s) / peekFactor)} })
		if err != nil {
			return nil, fmt.Errorf("redis: claim: %w", err)
		}
	}
	var out []relay.Lease
	var failed error // the first shard that did not answer
	answered := heads != nil && slices.ContainsFunc(down, func(err error) bool { return err == nil })
	for i := range e.k.shards {
		s := (start + i) % e.k.shards
		h := shardHead{asked: asked(s)}
		if heads != nil {
			if down[s] != nil {
				continue // its master is down: the others are claimed meanwhile
			}
			var err error
			if h.cands, h.agents, h.more, err = decodePeek(heads[s]); err != nil {
				return out, fmt.Errorf("redis: claim: %w", err)
			}
			if len(h.cands) == 0 && len(h.agents) == 0 {
				continue
			}
		}
		got, err := e.claimFrom(e.holding(ctx, len(out) > 0, leaseFor), s, max-len(out), leaseFor, flow, h)
		out = append(out, got...)
		if errors.Is(err, relay.ErrUnavailable) {
			// Its master went down since the peek (or is failing over):
			// the leases taken elsewhere go out now, and the next claim
			// tries it again.
			failed = cmp.Or(failed, err)
			continue
		}
		if err != nil {
			return out, err // with the leases taken so far: they are the caller's
		}
		answered = true
		if len(out) >= max {
			break
		}
	}
	if failed != nil && !answered {
		return out, failed
	}
	return out, nil
}

// claimFrom leases up to want of shard s's due one-shots, starting with
// its head h, and reading the shard again while others took what it saw,
// while flow control held back what it saw of a head that holds more, or
// while more agents' held fires may go out than it saw.
func (e *queue) claimFrom(ctx context.Context, s, want int, leaseFor time.Duration, flow relay.Flow, h shardHead) ([]relay.Lease, error) {
	cands, asked, agents, more := h.cands, h.asked, h.agents, h.more
	leaseMs := durMs(leaseFor)
	var out []relay.Lease
	grow, busy := 0, 0
	for try := 0; try < claimWork && len(out) < want; try++ {
		n := want - len(out)
		ask := min(max(n*peekFactor, grow), maxPeek)
		if len(cands) == asked && asked < ask {
			// The head saw less than this claim may take of a shard that
			// holds more: read it afresh (agents too).
			cands, agents = nil, nil
		}
		if cands == nil || len(cands) > ask {
			asked = ask
			if cands != nil {
				cands = cands[:ask]
			}
		}
		if len(cands) == 0 && len(agents) == 0 {
			cands = nil // nothing peeked to go on: read the shard
		}
		given := cands != nil
		got, r, err := e.claimShard(e.holding(ctx, len(out) > 0, leaseFor), s, n, ask, leaseMs, flow, cands, agents)
		if given {
			r.more = more
		}
		cands, agents, more = nil, nil, false // later tries read the shard again
		out = append(out, got...)
		if err != nil {
			return out, err
		}
		switch {
		case r.more:
			// More agents' held fires may go out than it saw: read on.
		case r.peeked == 0 && r.pulled == 0:
			return out, nil // nothing due
		case r.peeked < asked && r.pulled == 0 && (len(got) > 0 || r.held > 0):
			return out, nil // it saw all that was due
		case len(got) == 0 && r.held == 0 && r.pulled == 0:
			if busy++; busy >= claimTries {
				return out, nil // others keep taking what it sees
			}
		}
		if r.held > 0 {
			grow = min(ask*4, maxPeek) // read on past an agent without room
		}
	}
	return out, nil
}

// claimShard leases up to want of shard s's held fires of agents (ready,
// or whose gate passed) and due candidates under flow: cands and agents
// when given (already peeked), else a fresh peek of up to peek entries at
// the shard's due head and of its agents.
func (e *queue) claimShard(ctx context.Context, s, want, peek int, leaseMs int64, flow relay.Flow, cands, agents []any) ([]relay.Lease, claimResult, error) {
	now := e.nowArg()
	var more bool
	if cands == nil {
		v, err := e.run(ctx, scriptPeekDue, []string{e.k.due(s), e.k.gated(s), e.k.ready(s)}, now, min(peek, maxPeek), agentsFor(want))
		if err != nil {
			return nil, claimResult{}, fmt.Errorf("redis: claim: %w", err)
		}
		if cands, agents, more, err = decodePeek(v); err != nil {
			return nil, claimResult{}, fmt.Errorf("redis: claim: %w", err)
		}
	}
	if len(cands) == 0 && len(agents) == 0 {
		return nil, claimResult{more: more}, nil
	}
	names := make([]string, 0, len(agents)+len(cands))
	index := make(map[string]bool, len(agents)+len(cands))
	for _, g := range agents {
		a, err := str(g)
		if err != nil {
			return nil, claimResult{}, fmt.Errorf("redis: claim: %w", err)
		}
		if !index[a] {
			index[a] = true
			names = append(names, a)
		}
	}
	ng := len(names)
	members := make([]any, 0, len(cands))
	for _, c := range cands {
		m, err := str(c)
		if err != nil {
			return nil, claimResult{}, fmt.Errorf("redis: claim: %w", err)
		}
		agent, _, ok := splitMember(m)
		if !ok {
			return nil, claimResult{}, fmt.Errorf("redis: claim: malformed due entry %q", m)
		}
		if !index[agent] {
			index[agent] = true
			names = append(names, agent)
		}
		members = append(members, m)
	}
	keys := make([]string, 8, 8+4*len(names))
	keys[0], keys[1], keys[2], keys[3] = e.k.due(s), e.k.lease(s), e.k.token(s), e.k.shardStopped(s)
	keys[4], keys[5], keys[6], keys[7] = e.k.held(s), e.k.gated(s), e.k.ready(s), e.k.inFlight(s)
	args := make([]any, 7, 7+len(names)+len(members))
	args[0], args[1], args[2], args[3], args[4], args[5], args[6] = now, leaseMs, want,
		max(flow.Parallelism, 0), rateArg(flow.Rate), len(names), ng
	for _, a := range names {
		keys = append(keys, e.k.rows(s, a), e.k.agent(s, a), e.k.heldOf(s, a), e.k.flexOf(s, a))
		args = append(args, a)
	}
	args = append(args, members...)
	v, err := e.run(ctx, scriptClaim, keys, args...)
	if err != nil {
		return nil, claimResult{peeked: len(cands), more: more}, fmt.Errorf("redis: claim: %w", err)
	}
	out, r, err := decodeClaimed(v, names, time.Now())
	r.peeked, r.more = len(cands), more
	if err != nil {
		err = fmt.Errorf("redis: claim: %w", err)
	}
	return out, r, err
}
