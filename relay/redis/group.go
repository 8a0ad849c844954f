package redis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// groupBatch bounds the calls of one group commit.
const groupBatch = 256

// groupCommit queues the calls of one kind for one shard and sends them
// together: while one script call is in flight, the calls that arrive queue
// up and go out in the next one, so a burst costs a few round trips, not one
// per call, and a lone call waits for nobody.
type groupCommit[T any] struct {
	mu      sync.Mutex
	pending []*groupReq[T]
	busy    bool // a flush is running
}

// groupQueues are the group commits of one kind, one per queue key (see
// core.queueOf), made on first use.
type groupQueues[T any] struct {
	mu sync.Mutex
	m  map[string]*groupCommit[T]
}

// get returns the group commit of key.
func (q *groupQueues[T]) get(key string) *groupCommit[T] {
	q.mu.Lock()
	defer q.mu.Unlock()
	g := q.m[key]
	if g == nil {
		if q.m == nil {
			q.m = make(map[string]*groupCommit[T])
		}
		g = &groupCommit[T]{}
		q.m[key] = g
	}
	return g
}

// groupReq is one call waiting for its batch.
type groupReq[T any] struct {
	v    T
	done chan error
}

// groupSend sends one batch in one script call and answers every request
// of it on its done channel.
type groupSend[T any] func(ctx context.Context, batch []*groupReq[T])

// submit queues v on g and waits for its batch: the first caller of an
// idle group sends at once; callers that arrive meanwhile wait for the next
// batch, which a goroutine sends, so no caller waits for others' calls. The
// batch's context keeps ctx's values but not its cancellation (other
// callers ride on it) and is bounded by timeout; a caller whose ctx ends
// stops waiting, its call still sent.
func submit[T any](ctx context.Context, g *groupCommit[T], v T, timeout time.Duration, send groupSend[T]) error {
	req := &groupReq[T]{v: v, done: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, req)
	if g.busy {
		g.mu.Unlock()
		select {
		case err := <-req.done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g.busy = true
	g.mu.Unlock()
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	if batch := g.take(); batch != nil {
		send(bctx, batch)
	}
	cancel()
	g.mu.Lock()
	more := len(g.pending) > 0
	if !more {
		g.busy = false
	}
	g.mu.Unlock()
	if more {
		go g.drain(ctx, timeout, send)
	}
	return <-req.done
}

// drain sends queued batches until none is left, then clears busy.
func (g *groupCommit[T]) drain(ctx context.Context, timeout time.Duration, send groupSend[T]) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	for batch := g.take(); batch != nil; batch = g.take() {
		send(bctx, batch)
	}
}

// take removes up to groupBatch queued requests; when none is queued it
// clears busy and returns nil.
func (g *groupCommit[T]) take() []*groupReq[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		g.busy = false
		return nil
	}
	n := min(len(g.pending), groupBatch)
	batch := g.pending[:n:n]
	g.pending = g.pending[n:]
	if len(g.pending) == 0 {
		g.pending = nil
	}
	return batch
}

// byShard splits a batch of requests by the shard shardOf gives each, in
// the order the shards first appear, keeping the order of each shard's
// requests.
func byShard[T any](batch []*groupReq[T], shardOf func(T) int) (shards []int, parts [][]*groupReq[T]) {
	if len(batch) == 0 {
		return nil, nil
	}
	first, one := shardOf(batch[0].v), true
	for _, r := range batch[1:] {
		one = one && shardOf(r.v) == first
	}
	if one {
		return []int{first}, [][]*groupReq[T]{batch}
	}
	for _, r := range batch {
		s := shardOf(r.v)
		i := slices.Index(shards, s) // a batch holds at most groupBatch shards
		if i < 0 {
			i = len(shards)
			shards = append(shards, s)
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], r)
	}
	return shards, parts
}

// scriptCall is the KEYS and ARGV of one script call.
type scriptCall struct {
	keys []string
	args []any
}

// errNotSent is the error of a call a pipeline did not send.
var errNotSent = errors.New("redis: pipeline sent no command")

// runEach runs sc once per call, all in one pipeline (one round trip on a
// single node; one per node on a Cluster), and hands each call's reply and
// error to answer. A call that failed in the pipeline for a reason a retry
// may fix (a script Redis no longer knows, a lost connection) is run again
// by itself, with the retries of run, as run would have retried it.
func (e *core) runEach(ctx context.Context, sc *goredis.Script, calls []scriptCall, answer func(i int, v any, err error)) {
	if len(calls) == 1 {
		v, err := e.run(ctx, sc, calls[0].keys, calls[0].args...)
		answer(0, v, err)
		return
	}
	var cmds []goredis.Cmder
	_ = e.retry(ctx, func(ctx context.Context) error {
		cmds, _ = e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, c := range calls {
				sc.EvalSha(ctx, p, c.keys, c.args...)
			}
			return nil
		})
		return nil // each call's own error is judged below
	})
	for i, c := range calls {
		var v any
		err := errNotSent
		if i < len(cmds) {
			v, err = cmds[i].(*goredis.Cmd).Result()
		}
		if errors.Is(err, goredis.Nil) {
			v, err = nil, nil
		}
		if err != nil && (goredis.HasErrorPrefix(err, "NOSCRIPT") || retryable(err) || i >= len(cmds)) {
			v, err = e.run(ctx, sc, c.keys, c.args...)
		}
		answer(i, v, err)
	}
}
