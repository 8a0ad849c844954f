package redis

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func TestNewClientURLForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		kind      string // "node", "cluster", "failover" or "" for an error
		prefix    string
		shards    int
	}{
		{"one node", "redis://127.0.0.1:6379/2", "node", "", 0},
		{"tls node", "rediss://user:pw@cache.internal:6380", "node", "", 0},
		{"engine options", "redis://127.0.0.1:6379?prefix=prod&shards=16&dial_timeout=2s", "node", "prod", 16},
		{"cluster by seeds", "redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", "cluster", "", 0},
		{"cluster scheme", "redis+cluster://10.0.0.1:7000", "cluster", "", 0},
		{"sentinel scheme", "redis+sentinel://10.0.0.1:26379/0?master_name=main&addr=10.0.0.2:26379", "failover", "", 0},
		{"sentinel query", "redis://10.0.0.1:26379?master_name=main", "failover", "", 0},
		{"sentinel without master", "redis+sentinel://10.0.0.1:26379", "", "", 0},
		{"unknown scheme", "http://127.0.0.1:6379", "", "", 0},
		{"unknown kind", "redis+ring://127.0.0.1:6379", "", "", 0},
		{"bad shards", "redis://127.0.0.1:6379?shards=zero", "", "", 0},
		{"bad lost_report_for", "redis://127.0.0.1:6379?lost_report_for=soon", "", "", 0},
		{"lost_report_for", "redis://127.0.0.1:6379?lost_report_for=10m&prefix=p", "node", "p", 0},
		{"unknown option", "redis://127.0.0.1:6379?colour=blue", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts Options
			c, err := newClient(tc.url, &opts)
			if tc.kind == "" {
				if err == nil {
					_ = c.Close()
					t.Fatalf("newClient(%q) succeeded, want an error", tc.url)
				}
				return
			}
			if err != nil {
				t.Fatalf("newClient(%q): %v", tc.url, err)
			}
			defer c.Close()
			kind := "node"
			var honoursDeadlines bool
			switch cc := c.(type) {
			case *goredis.ClusterClient:
				kind = "cluster"
				honoursDeadlines = cc.Options().ContextTimeoutEnabled
			case *goredis.Client:
				// go-redis names the address of a Sentinel-backed client so.
				if cc.Options().Addr == "FailoverClient" {
					kind = "failover"
				}
				honoursDeadlines = cc.Options().ContextTimeoutEnabled
			}
			// Without it a stopped Redis holds a call for the read timeout
			// whatever the caller's deadline.
			if !honoursDeadlines {
				t.Error("the client does not honour context deadlines on its connections")
			}
			if kind != tc.kind {
				t.Errorf("client kind %s, want %s", kind, tc.kind)
			}
			if opts.Prefix != tc.prefix || opts.Shards != tc.shards {
				t.Errorf("options prefix %q shards %d, want %q %d", opts.Prefix, opts.Shards, tc.prefix, tc.shards)
			}
		})
	}
}

func TestNewClientFailoverOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url   string
		ok          bool
		refresh     time.Duration // the Cluster client's reload interval; 0 for a node
		minReplicas int
		replicaWait time.Duration
	}{
		{"cluster default refresh", "redis+cluster://10.0.0.1:7000", true, DefaultClusterRefresh, 0, 0},
		{"cluster refresh", "redis+cluster://10.0.0.1:7000?cluster_refresh=500ms", true, 500 * time.Millisecond, 0, 0},
		{"replicas", "redis://127.0.0.1:6379?min_replicas=1&replica_timeout=250ms", true, 0, 1, 250 * time.Millisecond},
		{"bad refresh", "redis+cluster://10.0.0.1:7000?cluster_refresh=often", false, 0, 0, 0},
		{"negative replicas", "redis://127.0.0.1:6379?min_replicas=-1", false, 0, 0, 0},
		{"bad replica timeout", "redis://127.0.0.1:6379?replica_timeout=0s", false, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts Options
			c, err := newClient(tc.url, &opts)
			if !tc.ok {
				if err == nil {
					_ = c.Close()
					t.Fatalf("newClient(%q) succeeded, want an error", tc.url)
				}
				return
			}
			if err != nil {
				t.Fatalf("newClient(%q): %v", tc.url, err)
			}
			defer c.Close()
			if cc, ok := c.(*goredis.ClusterClient); ok {
				if got := cc.Options().ClusterStateReloadInterval; got != tc.refresh {
					t.Errorf("reload interval %s, want %s", got, tc.refresh)
				}
				if got := cc.Options().DialerRetries; got != 1 {
					t.Errorf("dialer retries %d, want 1", got)
				}
			}
			if opts.MinReplicas != tc.minReplicas || opts.ReplicaTimeout != tc.replicaWait {
				t.Errorf("min replicas %d timeout %s, want %d %s", opts.MinReplicas, opts.ReplicaTimeout, tc.minReplicas, tc.replicaWait)
			}
		})
	}
}
