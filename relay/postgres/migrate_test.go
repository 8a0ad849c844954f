package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/internal/pgtest"
	"github.com/chronoscron/chronos/relay/postgres"
)

// TestMigrateFromSeveralProcessesAtOnce: migrations run side by side on one
// fresh schema apply each migration once between them, and all succeed.
func TestMigrateFromSeveralProcessesAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := freshSchema()
	const n = 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied []string
		errs    []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := postgres.Migrate(ctx, pgtest.URL(t), postgres.Options{Schema: schema})
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, res.Applied...)
			if err != nil {
				errs = append(errs, err)
			} else if res.To != postgres.SchemaVersion() {
				errs = append(errs, errors.New("a run ended below the binary's version"))
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("migrations side by side: %v", errs)
	}
	if len(applied) != postgres.SchemaVersion() {
		t.Fatalf("applied %v between %d runs, want each of %d migrations once", applied, n, postgres.SchemaVersion())
	}
	again, err := postgres.Migrate(ctx, pgtest.URL(t), postgres.Options{Schema: schema})
	if err != nil || len(again.Applied) != 0 || again.From != again.To {
		t.Fatalf("a later run: %+v, %v; want nothing to do", again, err)
	}
}

// TestSchemaNewerThanTheBinaryIsRefused: a schema a newer binary migrated is
// refused by Migrate and by Open, and left as it was.
func TestSchemaNewerThanTheBinaryIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newEngine(t, postgres.Options{})
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO `+e.Schema()+`.chronos_schema_migrations (version, name) VALUES (999, 'future')`); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, pgtest.URL(t), postgres.Options{Schema: e.Schema()}); !errors.Is(err, postgres.ErrSchemaNewer) {
		t.Errorf("migrate a newer schema: %v, want ErrSchemaNewer", err)
	}
	for _, migrate := range []bool{false, true} {
		if o, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{Schema: e.Schema(), Migrate: migrate}); !errors.Is(err, postgres.ErrSchemaNewer) {
			if o != nil {
				_ = o.Close()
			}
			t.Errorf("open a newer schema (migrate %v): %v, want ErrSchemaNewer", migrate, err)
		}
	}
	var versions int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+e.Schema()+`.chronos_schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != postgres.SchemaVersion()+1 {
		t.Errorf("%d versions recorded after the refusals, want %d (unchanged)", versions, postgres.SchemaVersion()+1)
	}
}

// TestUnmigratedSchemaIsRefused: without Options.Migrate, Open refuses a
// schema that was never migrated, naming the command that does it.
func TestUnmigratedSchemaIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{Schema: freshSchema()})
	if o != nil {
		_ = o.Close()
	}
	if !errors.Is(err, postgres.ErrSchemaBehind) || !strings.Contains(err.Error(), "chronos nas migrate") {
		t.Fatalf("open an unmigrated schema: %v, want ErrSchemaBehind naming chronos nas migrate", err)
	}
}
