package redis

// A master that fails: following the failover, writes acknowledged only
// once replicated, the shards a readiness check names, and repeated
// failures logged once with a count.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

// errReplicas is the error of a write WAIT did not see replicated in time.
var errReplicas = errors.New("replicas did not confirm the write")

// reloadMap asks a Cluster client to reload its slot map (at most one
// reload at a time; go-redis spaces them 200 ms apart): after a failover a
// refused connection is the first sign, and go-redis reloads on MOVED and
// READONLY only.
func (e *core) reloadMap(err error) {
	if e.cluster != nil && retryable(err) {
		e.cluster.ReloadState(context.Background())
	}
}

// nodeOf returns the client of the master that serves key: on a Cluster the
// node's own client, so that a pipeline on it is one connection; else the
// engine's client.
func (e *core) nodeOf(ctx context.Context, key string) (goredis.Cmdable, error) {
	if e.cluster == nil {
		return e.c, nil
	}
	c, err := e.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// runWrite runs a script that writes, as run does; under
// Options.MinReplicas, a WAIT on the same connection follows it, and a
// write that fewer replicas confirmed within Options.ReplicaTimeout fails
// with relay.ErrUnavailable (it was applied on the master: the caller's
// retry finds it done, as after a lost reply).
func (e *core) runWrite(ctx context.Context, sc *goredis.Script, keys []string, args ...any) (any, error) {
	if e.opts.MinReplicas <= 0 {
		return e.run(ctx, sc, keys, args...)
	}
	var v any
	var acked int64
	err := e.retry(ctx, func(ctx context.Context) error {
		node, err := e.nodeOf(ctx, keys[0])
		if err != nil {
			return err
		}
		for try := 0; ; try++ {
			var run, wait *goredis.Cmd
			_, err := node.Pipelined(ctx, func(p goredis.Pipeliner) error {
				if try == 0 {
					run = sc.EvalSha(ctx, p, keys, args...)
				} else {
					run = sc.Eval(ctx, p, keys, args...) // the node does not know it (a promoted replica)
				}
				wait = p.Do(ctx, "WAIT", e.opts.MinReplicas, e.opts.ReplicaTimeout.Milliseconds())
				return nil
			})
			if err != nil && try == 0 && goredis.HasErrorPrefix(run.Err(), "NOSCRIPT") {
				continue
			}
			v, err = run.Result()
			if errors.Is(err, goredis.Nil) {
				v, err = nil, nil
			}
			if err != nil {
				return err
			}
			acked, err = wait.Int64()
			return err
		}
	})
	if err != nil {
		return nil, err
	}
	if acked < int64(e.opts.MinReplicas) {
		return nil, fmt.Errorf("%w: %w: %d of %d within %s", relay.ErrUnavailable, errReplicas, acked, e.opts.MinReplicas, e.opts.ReplicaTimeout)
	}
	return v, nil
}

// ShardsDown pings the master of every shard at once, each bounded by
// ctx, and returns the shards that did not answer, with why, joined into
// one error naming them ("shards 3,7 unavailable: ..."); nil when every
// shard answered. On one node every shard is that node.
func (e *core) ShardsDown(ctx context.Context) error {
	type answer struct {
		shard int
		err   error
	}
	ch := make(chan answer, e.k.shards)
	var wg sync.WaitGroup
	for s := range e.k.shards {
		wg.Go(func() {
			node, err := e.nodeOf(ctx, e.k.due(s))
			if err == nil {
				err = node.Ping(ctx).Err()
			}
			if err != nil {
				e.reloadMap(err)
			}
			ch <- answer{s, err}
		})
	}
	wg.Wait()
	close(ch)
	var down []int
	why := map[string]bool{}
	for a := range ch {
		if a.err != nil {
			down = append(down, a.shard)
			why[unavailable(ctx, a.err).Error()] = true
		}
	}
	if len(down) == 0 {
		return nil
	}
	sort.Ints(down)
	ids := make([]string, len(down))
	for i, s := range down {
		ids[i] = strconv.Itoa(s)
	}
	reasons := make([]string, 0, len(why))
	for r := range why {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	return fmt.Errorf("%w: %d of %d shards unavailable (%s): %s", relay.ErrUnavailable,
		len(down), e.k.shards, strings.Join(ids, ","), strings.Join(reasons, "; "))
}

// faultLogEvery is how often a failure that keeps repeating is logged
// again, with the count of its repeats.
const faultLogEvery = 10 * time.Second

// faultLog logs a failure the first time it is seen and then, while it
// repeats, once every faultLogEvery with how many times it happened: an
// outage of a master gives a few lines, not one per call.
type faultLog struct {
	mu   sync.Mutex
	seen map[string]*faultCount
}

// faultCount is one failure's repeats since it was last logged.
type faultCount struct {
	logged time.Time
	n      int
}

// warn logs msg with err at warning level, or counts it if the same
// message and error were logged less than faultLogEvery ago.
func (f *faultLog) warn(ctx context.Context, log *slog.Logger, msg string, err error, attrs ...any) {
	key := msg + "\x00" + err.Error()
	now := time.Now()
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[string]*faultCount{}
	}
	c := f.seen[key]
	if c != nil && now.Sub(c.logged) < faultLogEvery {
		c.n++
		f.mu.Unlock()
		return
	}
	repeats := 0
	if c != nil {
		repeats = c.n
	}
	f.seen[key] = &faultCount{logged: now}
	if len(f.seen) > 256 { // forget the stale ones
		for k, v := range f.seen {
			if now.Sub(v.logged) >= faultLogEvery {
				delete(f.seen, k)
			}
		}
	}
	f.mu.Unlock()
	log.WarnContext(ctx, msg, append([]any{"err", err, "repeats", repeats}, attrs...)...)
}

// runEachWrite is runEach for writes under Options.MinReplicas: each call
// by itself, followed by its WAIT (see runWrite).
func (e *core) runEachWrite(ctx context.Context, sc *goredis.Script, calls []scriptCall, answer func(i int, v any, err error)) {
	for i, c := range calls {
		v, err := e.runWrite(ctx, sc, c.keys, c.args...)
		answer(i, v, err)
	}
}

// peekShards runs sc once per shard in one pipeline, as runShards does,
// but answers per shard: a shard whose master did not answer gets its
// error and the others their replies, so that a claim or a reap goes on
// with the shards that are up. Only when no shard answered is the whole
// retried (as runShards would).
func (e *core) peekShards(ctx context.Context, sc *goredis.Script, keys func(s int) []string, args func(s int) []any) ([]any, []error, error) {
	out := make([]any, e.k.shards)
	errs := make([]error, e.k.shards)
	err := e.retry(ctx, func(ctx context.Context) error {
		cmds, _ := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for s := range e.k.shards {
				sc.EvalSha(ctx, p, keys(s), args(s)...)
			}
			return nil
		})
		answered := 0
		var first error
		for s := range e.k.shards {
			out[s], errs[s] = nil, errNotSent
			if s < len(cmds) {
				out[s], errs[s] = cmds[s].(*goredis.Cmd).Result()
			}
			if goredis.HasErrorPrefix(errs[s], "NOSCRIPT") {
				// A node that does not know the script (restarted, or a
				// promoted replica): by itself, with EVAL.
				out[s], errs[s] = sc.Run(ctx, e.c, keys(s), args(s)...).Result()
			}
			if errors.Is(errs[s], goredis.Nil) {
				out[s], errs[s] = nil, nil
			}
			if errs[s] == nil {
				answered++
				continue
			}
			e.reloadMap(errs[s])
			if first == nil {
				first = errs[s]
			}
		}
		if answered == 0 && first != nil {
			return first
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for s, err := range errs {
		if err != nil {
			errs[s] = unavailable(ctx, err)
		}
	}
	return out, errs, nil
}

// clientLogOnce installs clientLog as go-redis's logger (a process-wide
// setting) the first time Open runs.
var clientLogOnce sync.Once

// clientFaults collapses the go-redis client's repeated lines.
var clientFaults faultLog

// clientLog sends go-redis's own lines (a dial that failed, a pool
// trouble) to slog, each repeated line once with a count, rather than one
// line per dial to stderr while a master is down.
type clientLog struct{}

// Printf implements go-redis's logger.
func (clientLog) Printf(ctx context.Context, format string, v ...any) {
	clientFaults.warn(ctx, slog.Default(), "redis client", fmt.Errorf(format, v...))
}
