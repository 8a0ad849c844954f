package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay/postgres"
	"github.com/chronoscron/chronos/relay/relaytest"
)

// TestRevokedSessions: a revoked session is listed for every engine of the
// schema until its ttl passes by the engine's clock; others never are; a
// bad call lists nothing.
func TestRevokedSessions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := relaytest.NewClock(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	a := newEngine(t, postgres.Options{Now: clock.Now})
	b := newEngine(t, postgres.Options{Schema: a.Schema(), Now: clock.Now})
	revoked := func(e *postgres.Engine, id string) bool {
		t.Helper()
		ok, err := e.SessionRevoked(ctx, id)
		if err != nil {
			t.Fatalf("session revoked %s: %v", id, err)
		}
		return ok
	}
	if err := a.RevokeSession(ctx, "s1", time.Minute); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if err := a.RevokeSession(ctx, "", time.Minute); err == nil {
		t.Error("revoking an empty id: no error")
	}
	if err := a.RevokeSession(ctx, "s2", 0); err == nil {
		t.Error("revoking for no time: no error")
	}
	if !revoked(b, "s1") || revoked(b, "s2") || revoked(b, "") {
		t.Fatalf("after one revocation: s1 %v, s2 %v, empty %v; want only s1", revoked(b, "s1"), revoked(b, "s2"), revoked(b, ""))
	}
	clock.Advance(59 * time.Second)
	if !revoked(a, "s1") {
		t.Fatal("s1 no longer listed before its ttl")
	}
	clock.Advance(time.Second)
	if revoked(a, "s1") {
		t.Fatal("s1 still listed once its ttl passed")
	}
	// A revocation after the entry expired lists it again.
	if err := b.RevokeSession(ctx, "s1", time.Minute); err != nil {
		t.Fatalf("revoke again: %v", err)
	}
	if !revoked(a, "s1") {
		t.Fatal("s1 revoked again is not listed")
	}
}
