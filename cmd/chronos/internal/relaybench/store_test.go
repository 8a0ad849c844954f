package relaybench

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgresRunSchema: a run on PostgreSQL gets a schema of its own,
// migrated, whatever schema= the URL names, and its cleanup drops it; the
// pool's options in the URL do not get in the way.
func TestPostgresRunSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", "not_this_one")
	q.Set("pool_max_conns", "4")
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	schemas := func() (n int) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid
			WHERE n.nspname LIKE 'bench\_%' AND c.relname = 'chronos_schema_migrations'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := schemas()
	engine, probes, cleanup, err := openStore(ctx, u.String(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if engine == nil || probes.redis != nil || probes.pg == nil {
		t.Fatalf("engine %v, redis client %v, postgres probe %v", engine, probes.redis, probes.pg)
	}
	if got := schemas(); got != before+1 {
		t.Errorf("%d bench schemas with the engine's tables while the run is open, want %d", got, before+1)
	}
	var other bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'not_this_one')`).Scan(&other); err != nil || other {
		t.Errorf("the URL's schema was made (%v)", err)
	}
	cleanup()
	if got := schemas(); got != before {
		t.Errorf("%d bench schemas after the cleanup, want %d", got, before)
	}
}
