package postgres

import (
	"context"
	"fmt"
	"time"
)

// sessions keeps the operator sessions' revocation list (nas.SessionRevoker)
// in chronos_revoked_sessions, by the engine's clock.
type sessions struct{ *core }

// RevokeSession lists the operator session id for ttl, and forgets a few
// entries that expired.
func (s *sessions) RevokeSession(ctx context.Context, id string, ttl time.Duration) error {
	if id == "" || ttl <= 0 {
		return fmt.Errorf("postgres: revoke session: want an id and a positive ttl")
	}
	_, err := s.pool.Exec(ctx, `
		WITH n AS (SELECT chronos_now_ms($3) AS ms),
		gone AS (
			DELETE FROM chronos_revoked_sessions WHERE id IN (
				SELECT id FROM chronos_revoked_sessions, n
				WHERE expires_ms <= n.ms AND id <> $1 ORDER BY expires_ms LIMIT 100
				FOR UPDATE SKIP LOCKED))
		INSERT INTO chronos_revoked_sessions (id, expires_ms)
		SELECT $1, n.ms + $2 FROM n
		ON CONFLICT (id) DO UPDATE SET expires_ms = greatest(chronos_revoked_sessions.expires_ms, excluded.expires_ms)`,
		id, ttl.Milliseconds(), s.now())
	return fail("revoke session", err)
}

// SessionRevoked reports whether the session id is listed and its entry
// has not expired.
func (s *sessions) SessionRevoked(ctx context.Context, id string) (bool, error) {
	var revoked bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM chronos_revoked_sessions
		WHERE id = $1 AND expires_ms > chronos_now_ms($2))`, id, s.now()).Scan(&revoked)
	if err != nil {
		return false, fail("session revoked", err)
	}
	return revoked, nil
}
