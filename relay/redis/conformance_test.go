package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
	"github.com/chronoscron/chronos/relay/relaytest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// newEngine returns an engine on the shared test Redis under a fresh prefix.
func newEngine(t *testing.T, opts redis.Options) *redis.Engine {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = redistest.Prefix(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := redis.Open(ctx, redistest.URL(t), opts)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func TestConformance(t *testing.T) {
	t.Parallel()
	relaytest.RunEngineSuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			return newEngine(t, redis.Options{})
		},
		NewWithClock: func(t *testing.T, c *relaytest.Clock) relay.Engine {
			return newEngine(t, redis.Options{Now: c.Now})
		},
	})
}

func TestConformanceOneShard(t *testing.T) {
	t.Parallel()
	relaytest.RunEngineSuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			return newEngine(t, redis.Options{Shards: 1})
		},
	})
}

func TestDispatcher(t *testing.T) {
	t.Parallel()
	relaytest.RunDispatcherSuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			return newEngine(t, redis.Options{})
		},
		Peer: func(t *testing.T, e relay.Engine) relay.Engine {
			return newEngine(t, redis.Options{Prefix: e.(*redis.Engine).Prefix()})
		},
	})
}
