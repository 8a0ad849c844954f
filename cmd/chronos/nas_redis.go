package main

import (
	"context"
	"log/slog"

	"github.com/chronoscron/chronos/relay"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// The Redis engine serves every store URL other than "memory": redis://,
// rediss://, the Sentinel form redis://sentinel:26379?master_name=NAME and
// the Cluster form redis://seed:7000?addr=seed2:7000, with the engine's
// own prefix= and shards= options in the query (see relay/redis.Open).
func init() {
	openRedisEngine = func(ctx context.Context, url string, logger *slog.Logger) (relay.Engine, error) {
		return relayredis.Open(ctx, url, relayredis.Options{Logger: logger})
	}
}
