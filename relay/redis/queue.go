package redis

import (
	"context"
	"fmt"
	"sync"
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

// Claim implements relay.Queue. One pipelined read finds the due heads of
// every shard; then the shards with due one-shots are claimed round-robin,
// starting at a different shard on every call, until there are max leases.
// Leases of one shard come in due order. When a step fails part way, the
// leases already taken are returned with the error.
func (e *Engine) Claim(ctx context.Context, max int, leaseFor time.Duration) ([]relay.Lease, error) {
	if max <= 0 {
		return nil, nil
	}
	leaseMs := durMs(leaseFor)
	now := e.nowArg()
	var heads []any
	if e.k.shards > 1 {
		var err error
		heads, err = e.runShards(ctx, scriptPeek,
			func(s int) []string { return []string{e.k.due(s)} },
			func(int) []any { return []any{now, max * peekFactor, "due"} })
		if err != nil {
			return nil, fmt.Errorf("redis: claim: %w", err)
		}
	}
	start := int(e.rr.Add(1))
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
		for try := 0; try < claimTries && len(out) < max; try++ {
			want := max - len(out)
			got, peeked, err := e.claimShard(ctx, s, want, leaseMs, cands)
			cands = nil // later tries read the shard again
			out = append(out, got...)
			if err != nil {
				return out, err // with the leases taken so far: they are the caller's
			}
			// Stop on this shard when it has nothing due, or when the claim
			// got what it looked at (what is left is not due yet).
			if peeked == 0 || len(got) > 0 && peeked < want*peekFactor {
				break
			}
		}
		if len(out) >= max {
			break
		}
	}
	return out, nil
}

// claimShard leases up to want of shard s's due candidates: cands when
// given (already peeked), else a fresh peek at the shard's due head.
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
	keys := make([]string, 3, 3+len(cands))
	keys[0], keys[1], keys[2] = e.k.due(s), e.k.lease(s), e.k.token(s)
	args := make([]any, 3, 3+len(cands))
	args[0], args[1], args[2] = now, leaseMs, want
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
	}
	v, err := e.run(ctx, scriptClaim, keys, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("redis: claim: %w", err)
	}
	rows, err := array(v)
	if err != nil {
		return nil, 0, fmt.Errorf("redis: claim: %w", err)
	}
	// Every row in the reply is leased now: hand over each one that decodes,
	// even when another does not (that one lapses and the reaper returns it).
	out := make([]relay.Lease, 0, len(rows))
	var bad error
	for _, r := range rows {
		l, err := decodeLease(r)
		if err != nil {
			bad = fmt.Errorf("redis: claim: %w", err)
			continue
		}
		out = append(out, l)
	}
	return out, len(cands), bad
}

// decodeLease reads {agent, job, until ms, row...}.
func decodeLease(v any) (relay.Lease, error) {
	f, err := array(v)
	if err != nil {
		return relay.Lease{}, err
	}
	if len(f) != 3+rowFields && len(f) != 4+rowFields {
		return relay.Lease{}, fmt.Errorf("%w: lease of %d fields", errReply, len(f))
	}
	agent, err := str(f[0])
	if err != nil {
		return relay.Lease{}, err
	}
	job, err := str(f[1])
	if err != nil {
		return relay.Lease{}, err
	}
	until, err := integer(f[2])
	if err != nil {
		return relay.Lease{}, err
	}
	o, err := decodeRow(agent, job, f[3:])
	if err != nil {
		return relay.Lease{}, err
	}
	tok, err := rowToken(f[3:])
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
	out, err := decodeLease(append([]any{l.AgentID, l.JobID}, f...))
	if err != nil {
		return relay.Lease{}, fmt.Errorf("redis: extend: %w", err)
	}
	return out, nil
}

// Ack implements relay.Queue. Acks of one shard are group-committed: while
// one script call is in flight, the acks that arrive queue up and go out
// together in the next call, so a burst costs a few round trips, not one per
// fire, and a lone ack waits for nobody.
func (e *Engine) Ack(ctx context.Context, l relay.Lease) error {
	s := e.k.shardOf(l.AgentID)
	a := &e.ackers[s]
	req := &ackReq{l: l, done: make(chan error, 1)}
	a.mu.Lock()
	a.pending = append(a.pending, req)
	if a.busy {
		a.mu.Unlock()
		select {
		case err := <-req.done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("redis: ack: %w", ctx.Err())
		}
	}
	a.busy = true
	a.mu.Unlock()
	e.flushAcks(ctx, s, true)
	return <-req.done
}

// ackBatch bounds the acks of one script call.
const ackBatch = 256

// ackReq is one Ack waiting for its batch.
type ackReq struct {
	l    relay.Lease
	done chan error
}

// acker queues the acks of one shard.
type acker struct {
	mu      sync.Mutex
	pending []*ackReq
	busy    bool // a flush is running
}

// flushAcks sends queued acks of shard s until none is left. The caller has
// set busy. With handOff, once the caller's own batch is done a goroutine
// takes over what queued meanwhile, so no caller waits for others' acks.
func (e *Engine) flushAcks(ctx context.Context, s int, handOff bool) {
	a := &e.ackers[s]
	// Other callers' acks ride on this call: do not let this caller's
	// cancellation fail them.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.ackTimeout())
	defer cancel()
	for {
		a.mu.Lock()
		if len(a.pending) == 0 {
			a.busy = false
			a.mu.Unlock()
			return
		}
		n := min(len(a.pending), ackBatch)
		batch := a.pending[:n:n]
		a.pending = a.pending[n:]
		if len(a.pending) == 0 {
			a.pending = nil
		}
		a.mu.Unlock()
		e.ackMany(ctx, s, batch)
		if handOff {
			a.mu.Lock()
			more := len(a.pending) > 0
			if !more {
				a.busy = false
			}
			a.mu.Unlock()
			if more {
				go e.flushAcks(ctx, s, false) // keeps ctx's values, not its end
			}
			return
		}
	}
}

// ackTimeout bounds one batch of acks, retries included.
func (e *Engine) ackTimeout() time.Duration {
	return max(e.opts.RetryFor, 0) + 10*time.Second
}

// ackMany runs one batch of acks and answers each caller.
func (e *Engine) ackMany(ctx context.Context, s int, batch []*ackReq) {
	keys := make([]string, 1, 1+len(batch))
	keys[0] = e.k.lease(s)
	args := make([]any, 1, 1+4*len(batch))
	args[0] = e.nowArg()
	for _, r := range batch {
		keys = append(keys, e.k.rows(s, r.l.AgentID))
		args = append(args, r.l.JobID, member(r.l.AgentID, r.l.JobID), r.l.ScheduleID, r.l.Token)
	}
	v, err := e.run(ctx, scriptAckMany, keys, args...)
	var res []any
	if err == nil {
		res, err = array(v)
		if err == nil && len(res) != len(batch) {
			err = fmt.Errorf("%w: %d results for %d acks", errReply, len(res), len(batch))
		}
	}
	for i, r := range batch {
		if err != nil {
			r.done <- fmt.Errorf("redis: ack: %w", err)
			continue
		}
		r.done <- fencedResult("ack", r.l, res[i], nil)
	}
}

// Nack implements relay.Queue. A one-shot that becomes the earliest of its
// shard is announced on the wake channel, so that every dispatcher, in any
// process, waiting for a later time learns of it: a retry comes at its step
// of the ladder, not at a dispatcher's next recheck.
func (e *Engine) Nack(ctx context.Context, l relay.Lease, delay time.Duration, reason string) error {
	s := e.k.shardOf(l.AgentID)
	v, err := e.run(ctx, scriptNack, []string{e.k.rows(s, l.AgentID), e.k.due(s), e.k.lease(s)},
		e.nowArg(), l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token, durMs(max(delay, 0)), reason, e.k.wake())
	if err := fencedResult("nack", l, v, err); err != nil {
		return err
	}
	if n, _ := integer(v); n == 2 {
		e.notify() // this process's dispatchers need not wait for the echo
	}
	return nil
}

// Kill implements relay.Queue.
func (e *Engine) Kill(ctx context.Context, l relay.Lease, reason string) error {
	s := e.k.shardOf(l.AgentID)
	v, err := e.run(ctx, scriptKill,
		[]string{e.k.rows(s, l.AgentID), e.k.due(s), e.k.lease(s), e.k.dead(s),
			e.k.deadByTime(s), e.k.deadOfAgent(s, l.AgentID), e.k.failed(s, l.AgentID)},
		e.nowArg(), l.JobID, member(l.AgentID, l.JobID), l.ScheduleID, l.Token, reason, l.AgentID, relay.FailedFeedCap)
	return fencedResult("kill", l, v, err)
}

// fencedResult maps the 1/0 reply of a fenced script.
func fencedResult(op string, l relay.Lease, v any, err error) error {
	if err != nil {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	n, err := integer(v)
	if err != nil {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	if n == 0 {
		return fmt.Errorf("redis: %s %s: %w", op, l.ScheduleID, relay.ErrLeaseLost)
	}
	return nil
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

// durMs rounds a duration up to whole milliseconds.
func durMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
