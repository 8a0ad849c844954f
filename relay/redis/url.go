package redis

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Open connects to the Redis of rawURL and returns an engine that owns the
// client (Close closes it). Accepted forms:
//
//	redis://[user:pass@]host:port[/db][?options]          one node
//	rediss://...                                           one node over TLS
//	redis://host:port?addr=host2:port2&addr=...            Cluster (several seed addresses)
//	redis+cluster://host:port[?addr=...]                   Cluster (also with one seed)
//	redis+sentinel://[user:pass@]host:26379[/db]?master_name=NAME[&addr=sentinel2:26379]
//	redis://sentinel:26379?master_name=NAME                Sentinel (the go-redis form)
//
// rediss+cluster and rediss+sentinel use TLS. The query may also hold
// go-redis's connection options (dial_timeout=3s, pool_size=20, ...) and the
// engine's own, which override opts: prefix=NAME, shards=N,
// lost_report_for=DURATION (Options.LostReportFor),
// cluster_refresh=DURATION (Options.ClusterRefresh), min_replicas=N
// (Options.MinReplicas) and replica_timeout=DURATION
// (Options.ReplicaTimeout).
//
// Every call to Redis is bounded: connecting by dial_timeout (go-redis's
// default 5s), each reply by read_timeout and each request by write_timeout
// (3s), and the client honours the deadline of the caller's context (and a
// relay.WithCallTimeout) on the connection itself, so a Redis that stops
// answering (a paused or partitioned server) fails a call at that deadline
// rather than after the read timeout and every retry.
func Open(ctx context.Context, rawURL string, opts Options) (*Engine, error) {
	clientLogOnce.Do(func() { goredis.SetLogger(clientLog{}) })
	c, err := newClient(rawURL, &opts)
	if err != nil {
		return nil, err
	}
	e, err := New(ctx, c, opts)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	e.owned = true
	return e, nil
}

// newClient parses rawURL into a client of the right kind and takes the
// engine's own query parameters out into opts.
func newClient(rawURL string, opts *Options) (goredis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis: parse url: %w", err)
	}
	q := u.Query()
	if v := q.Get("prefix"); v != "" {
		opts.Prefix = v
	}
	if v := q.Get("shards"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("redis: url: shards=%q is not a positive number", v)
		}
		opts.Shards = n
	}
	if v := q.Get("lost_report_for"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("redis: url: lost_report_for=%q is not a positive duration", v)
		}
		opts.LostReportFor = d
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"cluster_refresh", &opts.ClusterRefresh}, {"replica_timeout", &opts.ReplicaTimeout}} {
		if v := q.Get(d.name); v != "" {
			t, err := time.ParseDuration(v)
			if err != nil || t <= 0 {
				return nil, fmt.Errorf("redis: url: %s=%q is not a positive duration", d.name, v)
			}
			*d.to = t
		}
	}
	if v := q.Get("min_replicas"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("redis: url: min_replicas=%q is not a number of replicas", v)
		}
		opts.MinReplicas = n
	}
	for _, k := range []string{"prefix", "shards", "lost_report_for", "cluster_refresh", "replica_timeout", "min_replicas"} {
		q.Del(k)
	}
	u.RawQuery = q.Encode()

	scheme, kind, _ := strings.Cut(u.Scheme, "+")
	if scheme != "redis" && scheme != "rediss" {
		return nil, fmt.Errorf("redis: url scheme %q: want redis, rediss, redis+sentinel or redis+cluster", u.Scheme)
	}
	u.Scheme = scheme
	switch {
	case kind == "" && q.Has("master_name"), kind == "sentinel":
		if !q.Has("master_name") {
			return nil, fmt.Errorf("redis: url: a sentinel url needs master_name")
		}
		fo, err := goredis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("redis: parse sentinel url: %w", err)
		}
		fo.ContextTimeoutEnabled = true
		return goredis.NewFailoverClient(fo), nil
	case kind == "" && q.Has("addr"), kind == "cluster":
		co, err := goredis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("redis: parse cluster url: %w", err)
		}
		co.ContextTimeoutEnabled = true
		// go-redis reloads its slot map every minute by default, and on a
		// refused connection not at all: after a failover every call would
		// dial the dead master until then. The engine also asks for a
		// reload on every connection error (see retry).
		co.ClusterStateReloadInterval = opts.ClusterRefresh
		if co.ClusterStateReloadInterval <= 0 {
			co.ClusterStateReloadInterval = DefaultClusterRefresh
		}
		// One dial per try: go-redis would otherwise dial a dead master
		// five times, 100 ms apart, inside every call (a pipeline to all
		// masters with it), where the engine's own retry reloads the map
		// between tries.
		if co.DialerRetries == 0 {
			co.DialerRetries = 1
		}
		return goredis.NewClusterClient(co), nil
	case kind == "":
		o, err := goredis.ParseURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("redis: parse url: %w", err)
		}
		o.ContextTimeoutEnabled = true
		return goredis.NewClient(o), nil
	default:
		return nil, fmt.Errorf("redis: url scheme %q: want redis, rediss, redis+sentinel or redis+cluster", u.Scheme)
	}
}
