package nas

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// revokingEngine is an engine that keeps the revocation list itself.
type revokingEngine struct {
	*memory.Engine
	ids  map[string]time.Duration
	down bool
}

func (e *revokingEngine) RevokeSession(_ context.Context, id string, ttl time.Duration) error {
	if e.down {
		return relay.ErrUnavailable
	}
	e.ids[id] = ttl
	return nil
}

func (e *revokingEngine) SessionRevoked(_ context.Context, id string) (bool, error) {
	if e.down {
		return false, relay.ErrUnavailable
	}
	_, ok := e.ids[id]
	return ok, nil
}

// TestSessionRevocationsWhere: an engine that keeps the list gets it (and
// its failures stay ErrUnavailable); a shared store whose engine keeps none
// falls back to memory and warns; the embedded store uses memory quietly.
func TestSessionRevocationsWhere(t *testing.T) {
	t.Parallel()
	now := func() time.Time { return time.Unix(1_800_000_000, 0) }
	ctx := context.Background()

	eng := &revokingEngine{Engine: memory.New(memory.Options{}), ids: map[string]time.Duration{}}
	defer eng.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	r := newSessionRevocations(eng, "postgres://db/chronos", log, now)
	if err := r.Revoke(ctx, "s1", time.Hour); err != nil || eng.ids["s1"] != time.Hour {
		t.Fatalf("revoke through the engine: %v, %v", err, eng.ids)
	}
	if ok, err := r.Revoked(ctx, "s1"); !ok || err != nil {
		t.Fatalf("revoked s1: %v %v", ok, err)
	}
	if ok, err := r.Revoked(ctx, "s2"); ok || err != nil {
		t.Fatalf("revoked s2: %v %v", ok, err)
	}
	eng.down = true
	if _, err := r.Revoked(ctx, "s1"); !errors.Is(err, relay.ErrUnavailable) {
		t.Fatalf("a store that is down: %v, want ErrUnavailable", err)
	}
	if logs.Len() != 0 {
		t.Errorf("warned with an engine that keeps the list: %s", logs.String())
	}

	plain := memory.New(memory.Options{})
	defer plain.Close()
	for store, warn := range map[string]bool{"postgres://db/chronos": true, "memory": false} {
		logs.Reset()
		if _, ok := newSessionRevocations(plain, store, log, now).(*memoryRevocations); !ok {
			t.Errorf("%s: not the in-memory list", store)
		}
		if got := strings.Contains(logs.String(), "this NAS process only"); got != warn {
			t.Errorf("%s: warned %v, want %v: %s", store, got, warn, logs.String())
		}
	}
}
