package relaybench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/nas/node"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	"github.com/chronoscron/chronos/relay/postgres"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// openStore opens the store of a run; cleanup removes what it wrote. A
// Redis run's keys go under a fresh prefix, a PostgreSQL run's tables in a
// fresh schema (made by the engine's migrations), both removed after.
func openStore(ctx context.Context, store string, log *slog.Logger) (relay.Engine, storeProbes, func(), error) {
	if store == "memory" {
		e := memory.New(memory.Options{})
		return e, storeProbes{}, func() { _ = e.Close() }, nil
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	if node.StoreKind(store) == node.StorePostgres {
		schema := "bench_" + hex.EncodeToString(b[:])
		e, cleanup, err := openPostgres(ctx, store, schema, log)
		if err != nil {
			return nil, storeProbes{}, nil, err
		}
		pg, err := newPGProbe(ctx, store, schema)
		if err != nil {
			cleanup()
			return nil, storeProbes{}, nil, err
		}
		return e, storeProbes{pg: pg}, func() { pg.close(); cleanup() }, nil
	}
	prefix := "bench-" + hex.EncodeToString(b[:])
	e, err := relayredis.Open(ctx, store, relayredis.Options{Prefix: prefix, Logger: log})
	if err != nil {
		return nil, storeProbes{}, nil, fmt.Errorf("bench relay: store: %w", err)
	}
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		deleteKeys(cctx, e.Client(), "{chronos:"+prefix+":*")
		_ = e.Close()
	}
	return e, storeProbes{redis: e.Client()}, cleanup, nil
}

// storeProbes read what a run costs its store: Redis's memory and CPU, or
// PostgreSQL's table sizes and CPU. Both nil for the memory store.
type storeProbes struct {
	redis goredis.UniversalClient
	pg    *pgProbe
}

// openPostgres opens the PostgreSQL store in schema, migrated to this
// binary's version; cleanup drops the schema.
func openPostgres(ctx context.Context, store, schema string, log *slog.Logger) (relay.Engine, func(), error) {
	e, err := postgres.Open(ctx, store, postgres.Options{Schema: schema, Migrate: true, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("bench relay: store: %w", err)
	}
	cleanup := func() {
		_ = e.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropSchema(cctx, store, schema); err != nil {
			log.Error("bench relay: the run's schema is left behind", "schema", schema, "err", err)
		}
	}
	return e, cleanup, nil
}

// dropSchema drops schema and everything in it, on one connection to the
// server store names.
func dropSchema(ctx context.Context, store, schema string) error {
	conn, err := connectServer(ctx, store)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

// connectServer opens one connection to the PostgreSQL server of a store
// URL, without the engine's and the pool's own options, which mean nothing
// to the server.
func connectServer(ctx context.Context, store string) (*pgx.Conn, error) {
	u, err := url.Parse(store)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	for k := range q {
		if k == "schema" || strings.HasPrefix(k, "pool_") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return pgx.Connect(ctx, u.String())
}

// deleteKeys unlinks every key matching pattern, best effort.
func deleteKeys(ctx context.Context, c goredis.UniversalClient, pattern string) {
	var batch []string
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) >= 500 {
			c.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		c.Unlink(ctx, batch...)
	}
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisInfoInt reads an integer field of an INFO section.
func redisInfoInt(ctx context.Context, c goredis.UniversalClient, section, field string) (int64, error) {
	v, err := redisInfoField(ctx, c, section, field)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// waitLazyFree waits, at most for limit, until Redis has no objects left
// to free in the background.
func waitLazyFree(ctx context.Context, c goredis.UniversalClient, limit time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		n, err := redisInfoInt(ctx, c, "memory", "lazyfree_pending_objects")
		if err != nil || n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// redisCPU is the Redis server's user + system CPU seconds so far.
func redisCPU(ctx context.Context, c goredis.UniversalClient) float64 {
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := redisInfoField(ctx, c, "cpu", f)
		if err != nil {
			return 0
		}
		x, _ := strconv.ParseFloat(v, 64)
		total += x
	}
	return total
}

// redisInfoField reads one field of an INFO section.
func redisInfoField(ctx context.Context, c goredis.UniversalClient, section, field string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", fmt.Errorf("bench relay: info: %w", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("bench relay: info has no %s", field)
}
