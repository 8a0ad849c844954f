package redis_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
	"github.com/chronoscron/chronos/relay/relaytest"
)

func TestHistory(t *testing.T) {
	t.Parallel()
	relaytest.RunHistorySuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			return newEngine(t, redis.Options{})
		},
		Peer: func(t *testing.T, e relay.Engine) relay.Engine {
			return newEngine(t, redis.Options{Prefix: e.(*redis.Engine).Prefix()})
		},
	})
}

// TestHistoryOnACluster runs the history suite on a three-node Redis
// Cluster with shards on every node: the due histogram reads every node's
// shards, the history keys keep to the control slot.
func TestHistoryOnACluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	n := 0
	open := func(t *testing.T, prefix string) relay.Engine {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e, err := redis.Open(ctx, cluster.URL()+"&prefix="+prefix+"&shards=16", redis.Options{})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	var mu sync.Mutex
	relaytest.RunHistorySuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			mu.Lock()
			n++
			prefix := "hist" + strconv.Itoa(n)
			mu.Unlock()
			return open(t, prefix)
		},
		Peer: func(t *testing.T, e relay.Engine) relay.Engine {
			return open(t, e.(*redis.Engine).Prefix())
		},
	})
}
