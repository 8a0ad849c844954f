package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.Engine = (*Engine)(nil)

// Defaults of Options.
const (
	DefaultPrefix   = "default"
	DefaultShards   = 4
	DefaultRetryFor = 30 * time.Second
	// DefaultClusterRefresh is how often a Cluster client reloads its map
	// of slots to masters by itself (it also reloads at once on a
	// connection error, a MOVED or a READONLY reply).
	DefaultClusterRefresh = 2 * time.Second
	// DefaultReplicaTimeout bounds how long a write waits for its replicas
	// when Options.MinReplicas is set.
	DefaultReplicaTimeout = time.Second
)

// Options configure an Engine.
type Options struct {
	// Prefix separates deployments sharing one Redis; it goes inside the
	// hash tag {chronos:<prefix>:<shard>}. Default DefaultPrefix. It must not
	// contain '{' or '}'.
	Prefix string
	// Shards is how many shards one-shots are spread over (each shard is one
	// Cluster slot). Default DefaultShards. It is fixed for the life of the
	// data: an engine refuses to open data written with another count.
	Shards int
	// RetryFor is how long a call keeps retrying a lost connection (with
	// backoff) before it fails, unless its context's deadline or a
	// relay.WithCallTimeout ends it sooner. Default DefaultRetryFor;
	// negative disables.
	RetryFor time.Duration
	// Now, when set, replaces Redis's clock; it exists for tests that step
	// time by hand. Production leaves it nil so that every due time and
	// lease expiry is judged by the one clock of Redis.
	Now func() time.Time
	// LostReportFor is how long a store found to have lost its data is
	// reported (see CheckEpoch). Default DefaultLostReportFor.
	LostReportFor time.Duration
	// EpochCheck is how often the engine checks by itself that the store
	// still holds its data. Default DefaultEpochCheck; negative turns the
	// background check off (CheckEpoch still checks).
	EpochCheck time.Duration
	// Logger receives retries, subscription trouble and a lost store.
	// Default slog.Default().
	Logger *slog.Logger
	// ClusterRefresh is how often a Cluster client made by Open reloads
	// its slot map by itself (store URL option cluster_refresh). Default
	// DefaultClusterRefresh. It has no effect on a client passed to New.
	ClusterRefresh time.Duration
	// MinReplicas, when positive, makes an arm, an ack, a nack, a Down and
	// a kill return only once WAIT confirms that at least this many
	// replicas of the master hold the write (store URL option
	// min_replicas). A write the replicas do not confirm within
	// ReplicaTimeout fails with relay.ErrUnavailable: it was applied on
	// the master and may or may not survive a failover, and the caller
	// retries it. Zero (the default) acknowledges a write once the master
	// applied it.
	MinReplicas int
	// ReplicaTimeout bounds the WAIT of a write under MinReplicas (store
	// URL option replica_timeout). Default DefaultReplicaTimeout.
	ReplicaTimeout time.Duration
}

// Engine is the Redis relay engine. It is safe for concurrent use.
//
// Its methods come from the parts it is made of, one per responsibility,
// all on the one client and state (core). Every part's receiver is named
// e, for the engine it is a part of.
type Engine struct {
	*core            // the client, the calls' plumbing, Close, Wake (engine.go, failover.go, group.go, retry.go, wake.go)
	*queue           // armed rows, claims, leases and outcomes: relay.Armed, relay.Queue (arm.go, claim.go, ack.go, lookup.go)
	*flowControl     // relay.Flows and the re-key floor (flow.go, rekey.go)
	*fireRecords     // last fires, instances, first deliveries, failed fires (lastfire.go, control.go, delivery.go, failed.go)
	*deadLetters     // relay.DeadLetters (dead.go)
	*storeChecks     // relay.Census and relay.StoreEpoch (census.go, epoch.go)
	*deliveryHistory // relay.History (history.go)
}

// The parts of an Engine.
type (
	queue           struct{ *core }
	flowControl     struct{ *core }
	fireRecords     struct{ *core }
	deadLetters     struct{ *core }
	storeChecks     struct{ *core }
	deliveryHistory struct{ *core }
)

// core is the engine's client and state, and the plumbing its parts share.
type core struct {
	c         goredis.UniversalClient
	owned     bool // Close closes c
	k         keys
	opts      Options
	log       *slog.Logger
	rr        atomic.Uint32               // round-robin start shard of claims
	acker     groupQueues[ackItem]        // by master on a Cluster, one queue on a single node (see queueOf)
	lastFirer groupQueues[relay.LastFire] // as acker
	cluster   *goredis.ClusterClient      // c, when it is a Cluster client
	faults    faultLog                    // repeated failures, logged once with a count
	closed    chan struct{}

	wakeOnce sync.Once
	ps       *goredis.PubSub
	wake     relay.Broadcast
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	isClosed bool

	phases sync.Map // agent id → its spreading phase (float64), once read

	recounted []atomic.Int64 // per shard: when Reap last recounted its leases in flight (Unix ns)

	epochSem chan struct{} // held by the check under way
	epoch    string        // the epoch marker this engine knows; "" before the first check
	reported time.Time     // when the loss last logged was found; zero when none is reported
	shardSeq []int64       // per shard: the epoch sequence number last seen (under epochSem)
	// bumpEpoch: the check under way raises the shards' sequence numbers
	// (under epochSem).
	bumpEpoch bool
}

// New returns an engine on client c; the caller keeps ownership of c. It
// checks that Redis answers and that the data's shard count matches, adopts
// the store's epoch marker (writing one into an empty store) and, unless
// Options.EpochCheck is negative, keeps checking it until Close.
func New(ctx context.Context, c goredis.UniversalClient, opts Options) (*Engine, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redis: prefix %q must not contain braces", opts.Prefix)
	}
	if opts.Shards == 0 {
		opts.Shards = DefaultShards
	}
	if opts.Shards < 1 || opts.Shards > 1024 {
		return nil, fmt.Errorf("redis: shards %d out of range 1..1024", opts.Shards)
	}
	if opts.RetryFor == 0 {
		opts.RetryFor = DefaultRetryFor
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LostReportFor <= 0 {
		opts.LostReportFor = DefaultLostReportFor
	}
	if opts.EpochCheck == 0 {
		opts.EpochCheck = DefaultEpochCheck
	}
	if opts.MinReplicas < 0 {
		return nil, fmt.Errorf("redis: min replicas %d is negative", opts.MinReplicas)
	}
	if opts.ReplicaTimeout <= 0 {
		opts.ReplicaTimeout = DefaultReplicaTimeout
	}
	b := &core{
		c:         c,
		k:         newKeys(opts.Prefix, opts.Shards),
		opts:      opts,
		log:       opts.Logger,
		closed:    make(chan struct{}),
		epochSem:  make(chan struct{}, 1),
		recounted: make([]atomic.Int64, opts.Shards),
	}
	b.cluster, _ = c.(*goredis.ClusterClient)
	e := &Engine{core: b, queue: &queue{b}, flowControl: &flowControl{b}, fireRecords: &fireRecords{b},
		deadLetters: &deadLetters{b}, storeChecks: &storeChecks{b}, deliveryHistory: &deliveryHistory{b}}
	if err := e.checkShards(ctx); err != nil {
		return nil, err
	}
	if err := e.copyStopped(ctx); err != nil {
		return nil, fmt.Errorf("redis: open: %w", err)
	}
	if _, err := e.CheckEpoch(ctx); err != nil {
		return nil, fmt.Errorf("redis: open: %w", err)
	}
	if e.opts.EpochCheck > 0 {
		e.wg.Add(1)
		go e.watchEpoch()
	}
	return e, nil
}

// checkShards records the shard count on first use and refuses a mismatch.
func (e *core) checkShards(ctx context.Context) error {
	want := strconv.Itoa(e.opts.Shards)
	var got string
	err := e.retry(ctx, func(ctx context.Context) error {
		if err := e.c.SetNX(ctx, e.k.shardCount(), want, 0).Err(); err != nil {
			return err
		}
		v, err := e.c.Get(ctx, e.k.shardCount()).Result()
		got = v
		return err
	})
	if err != nil {
		return fmt.Errorf("redis: open: %w", err)
	}
	if got != want {
		return fmt.Errorf("redis: open: data of prefix %q was written with %s shards, not %s", e.opts.Prefix, got, want)
	}
	return nil
}

// Close stops the wake subscription and the epoch check and, if the engine
// opened its client, closes it.
func (e *core) Close() error {
	e.closeMu.Lock()
	if e.isClosed {
		e.closeMu.Unlock()
		return nil
	}
	e.isClosed = true
	close(e.closed)
	ps := e.ps
	e.closeMu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	e.wg.Wait()
	if e.owned {
		if err := e.c.Close(); err != nil {
			return fmt.Errorf("redis: close: %w", err)
		}
	}
	return nil
}

// Client returns the engine's Redis client.
func (e *core) Client() goredis.UniversalClient { return e.c }

// Prefix returns the key prefix in use.
func (e *core) Prefix() string { return e.opts.Prefix }

// Shards returns the shard count in use.
func (e *core) Shards() int { return e.opts.Shards }

// queueOf names the group-commit queue (acker, lastFirer) of agent's
// acknowledgements and last-fire records: on a Cluster, the address of the
// master serving the agent's shard, so that a master that is down stalls
// only its own shards' acknowledgements while each healthy master's go out
// in batches as large as on one node; on a single node, the one queue of
// every shard, where a batch's shards share its round trip (and all go
// down together).
func (e *core) queueOf(ctx context.Context, agent string) string {
	if e.cluster == nil {
		return ""
	}
	s := e.k.shardOf(agent)
	c, err := e.cluster.MasterForKey(ctx, e.k.due(s))
	if err != nil {
		return "shard " + strconv.Itoa(s)
	}
	return c.Options().Addr
}

// nowArg is ARGV[1] of every script: the injected clock in ms, or "" for
// Redis's clock.
func (e *core) nowArg() string {
	if e.opts.Now == nil {
		return ""
	}
	return strconv.FormatInt(e.opts.Now().UnixMilli(), 10)
}

// run runs a script, retrying a lost connection.
func (e *core) run(ctx context.Context, s *goredis.Script, keys []string, args ...any) (any, error) {
	var v any
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		v, err = s.Run(ctx, e.c, keys, args...).Result()
		if errors.Is(err, goredis.Nil) {
			v, err = nil, nil
		}
		return err
	})
	return v, err
}

// runShards runs script once per shard in one pipeline (one round trip on
// a single node; one per node on a Cluster): keys(s) and args(s) give the
// KEYS and ARGV of shard s. A script Redis no longer knows (after a restart)
// is loaded and the pipeline sent again.
func (e *core) runShards(ctx context.Context, sc *goredis.Script, keys func(s int) []string, args func(s int) []any) ([]any, error) {
	out := make([]any, e.k.shards)
	err := e.retry(ctx, func(ctx context.Context) error {
		for try := 0; ; try++ {
			cmds, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for s := range e.k.shards {
					sc.EvalSha(ctx, p, keys(s), args(s)...)
				}
				return nil
			})
			if err != nil && try == 0 && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				if lerr := sc.Load(ctx, e.c).Err(); lerr != nil {
					return lerr
				}
				continue
			}
			if err != nil && !errors.Is(err, goredis.Nil) {
				return err
			}
			for i, c := range cmds {
				v, err := c.(*goredis.Cmd).Result()
				if err != nil && !errors.Is(err, goredis.Nil) {
					return err
				}
				out[i] = v
			}
			return nil
		}
	})
	return out, err
}
