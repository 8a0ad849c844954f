package redis_test

import (
	"testing"

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
