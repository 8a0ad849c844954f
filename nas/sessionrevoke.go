package nas

// Where a logout ends an operator session before its expiry. A session
// value is self-contained (an id, an expiry and their HMAC), so any NAS
// process sharing the operator token accepts it; to end one early NAS keeps
// its id on a revocation list until the session would have expired anyway.
// On the Redis store the list lives in Redis beside the relay's keys, and on
// an engine that keeps such a list itself (SessionRevoker) in its store, so a
// logout answered by one NAS process holds on every other; on the embedded
// store (one process) it lives in memory. Only ids of sessions NAS itself
// signed are listed, each for at most OperatorSessionTTL.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

// sessionRevocations keeps the ids of the operator sessions a logout ended.
type sessionRevocations interface {
	// Revoke lists id for ttl.
	Revoke(ctx context.Context, id string, ttl time.Duration) error
	// Revoked reports whether id is listed.
	Revoked(ctx context.Context, id string) (bool, error)
}

// redisBacked is a relay engine on Redis: the Redis engine is one.
type redisBacked interface {
	Client() goredis.UniversalClient
	Prefix() string
}

// SessionRevoker is implemented by a relay engine that keeps the operator
// sessions' revocation list in its shared store, so that a logout holds on
// every NAS process sharing it. Both methods answer by the store's clock;
// a store that cannot be reached is an error wrapping relay.ErrUnavailable.
type SessionRevoker interface {
	// RevokeSession lists id for ttl.
	RevokeSession(ctx context.Context, id string, ttl time.Duration) error
	// SessionRevoked reports whether id is listed.
	SessionRevoked(ctx context.Context, id string) (bool, error)
}

// newSessionRevocations returns the revocation list of a Service on engine:
// in Redis when the engine is on Redis, in the engine's store when it is a
// SessionRevoker, else in memory, timed by now. A shared store (Redis,
// PostgreSQL) whose engine offers neither keeps the list in memory too, and
// says so: logouts then hold on this process only.
func newSessionRevocations(engine relay.Engine, store string, log *slog.Logger, now func() time.Time) sessionRevocations {
	if r, ok := engine.(redisBacked); ok {
		return &redisRevocations{c: r.Client(), prefix: "chronos:" + r.Prefix() + ":opsession:revoked:"}
	}
	if r, ok := engine.(SessionRevoker); ok {
		return engineRevocations{r}
	}
	if isRedisURL(store) {
		log.Warn("operator logouts end sessions on this NAS process only: the store engine does not expose its Redis client")
	}
	if IsPostgresURL(store) {
		log.Warn("operator logouts end sessions on this NAS process only: the store engine keeps no revocation list")
	}
	return &memoryRevocations{now: now, ids: map[string]time.Time{}}
}

// engineRevocations keeps the list in the engine's store.
type engineRevocations struct{ r SessionRevoker }

// Revoke implements sessionRevocations.
func (e engineRevocations) Revoke(ctx context.Context, id string, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	ctx, cancel := revocationCtx(ctx)
	defer cancel()
	if err := e.r.RevokeSession(ctx, id, ttl); err != nil {
		return fmt.Errorf("revoke the operator session: %w", err)
	}
	return nil
}

// Revoked implements sessionRevocations.
func (e engineRevocations) Revoked(ctx context.Context, id string) (bool, error) {
	ctx, cancel := revocationCtx(ctx)
	defer cancel()
	ok, err := e.r.SessionRevoked(ctx, id)
	if err != nil {
		return false, fmt.Errorf("check the operator session: %w", err)
	}
	return ok, nil
}

// revocationTimeout bounds a call to the revocation list when the request
// sets no store call timeout (relay.WithCallTimeout).
const revocationTimeout = 1500 * time.Millisecond

// redisRevocations lists each id as a key that expires with its session.
type redisRevocations struct {
	c      goredis.UniversalClient
	prefix string
}

// Revoke implements sessionRevocations.
func (r *redisRevocations) Revoke(ctx context.Context, id string, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	ctx, cancel := revocationCtx(ctx)
	defer cancel()
	if err := r.c.Set(ctx, r.prefix+id, "1", ttl).Err(); err != nil {
		return fmt.Errorf("revoke the operator session: %w: %w", relay.ErrUnavailable, err)
	}
	return nil
}

// Revoked implements sessionRevocations.
func (r *redisRevocations) Revoked(ctx context.Context, id string) (bool, error) {
	ctx, cancel := revocationCtx(ctx)
	defer cancel()
	n, err := r.c.Exists(ctx, r.prefix+id).Result()
	if err != nil {
		return false, fmt.Errorf("check the operator session: %w: %w", relay.ErrUnavailable, err)
	}
	return n > 0, nil
}

// revocationCtx bounds ctx by its store call timeout, or revocationTimeout.
func revocationCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := relay.CallTimeout(ctx)
	if !ok {
		d = revocationTimeout
	}
	return context.WithTimeout(ctx, d)
}

// memoryRevocations lists ids in memory, each until its expiry; expired
// ones are dropped as new ones come.
type memoryRevocations struct {
	now func() time.Time

	mu  sync.Mutex
	ids map[string]time.Time // id → until
}

// Revoke implements sessionRevocations.
func (m *memoryRevocations) Revoke(_ context.Context, id string, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, until := range m.ids {
		if !now.Before(until) {
			delete(m.ids, k)
		}
	}
	m.ids[id] = now.Add(ttl)
	return nil
}

// Revoked implements sessionRevocations.
func (m *memoryRevocations) Revoked(_ context.Context, id string) (bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.ids[id]
	return ok && now.Before(until), nil
}
