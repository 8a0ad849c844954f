package redis_test

import (
	"testing"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
	"github.com/chronoscron/chronos/relay/relaytest"
)

func TestCensus(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{0, 1} {
		relaytest.RunCensusSuite(t, relaytest.Factory{
			New: func(t *testing.T) relay.Engine { return newEngine(t, redis.Options{Shards: shards}) },
		})
	}
}
