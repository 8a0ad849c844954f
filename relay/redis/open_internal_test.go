package redis

import (
	"context"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
)

// openOneShard opens a one-shard engine under a fresh prefix on the test
// Redis, with now as its clock (nil: the real one), closed when t ends.
func openOneShard(ctx context.Context, t *testing.T, now func() time.Time) *Engine {
	t.Helper()
	e, err := Open(ctx, redistest.URL(t), Options{Prefix: redistest.Prefix(t), Shards: 1, Now: now})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}
