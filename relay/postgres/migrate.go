package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed schema/*.sql
var schemaFiles embed.FS

// migration is one versioned step of the schema.
type migration struct {
	Version int
	Name    string
	SQL     string
}

// migrations returns the embedded migrations in version order. A file is
// named NNNN_name.sql; its number is its version.
func migrations() ([]migration, error) {
	names, err := fs.Glob(schemaFiles, "schema/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "schema/"), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("postgres: migration file %s: want NNNN_name.sql", n)
		}
		b, err := schemaFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("postgres: migration %d (%s) out of sequence", m.Version, m.Name)
		}
	}
	return out, nil
}

// SchemaVersion is the schema version this binary writes: its newest
// migration.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// ErrSchemaNewer is the error of a database whose schema a newer binary
// wrote: this one refuses it rather than misread it.
var ErrSchemaNewer = errors.New("postgres: the database's schema is newer than this binary")

// ErrSchemaBehind is Open's error, without Options.Migrate, for a database
// whose schema is older than this binary's (or absent): run `chronos nas
// migrate`.
var ErrSchemaBehind = errors.New("postgres: the database's schema is behind this binary")

// MigrateResult is what a migration run did.
type MigrateResult struct {
	// From and To are the schema versions before and after.
	From, To int
	// Applied names the migrations applied, in order.
	Applied []string
}

// Migrate brings the schema that rawURL and opts name up to this binary's
// version and reports what it did. It is safe to run from several processes
// at once: one applies the pending migrations in one transaction while the
// others wait for it and then find nothing to do. A database newer than the
// binary is refused with ErrSchemaNewer and left untouched.
func Migrate(ctx context.Context, rawURL string, opts Options) (MigrateResult, error) {
	opts.Migrate = false
	connString, schema, err := parseURL(rawURL)
	if err != nil {
		return MigrateResult{}, err
	}
	if opts.Schema == "" {
		opts.Schema = schema
	}
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if !schemaName.MatchString(opts.Schema) {
		return MigrateResult{}, fmt.Errorf("postgres: schema %q: want lower-case letters, digits and _", opts.Schema)
	}
	conn, err := pgx.Connect(ctx, withoutPoolOptions(connString))
	if err != nil {
		return MigrateResult{}, fail("connect", err)
	}
	defer conn.Close(context.Background())
	return migrateConn(ctx, conn, opts.Schema)
}

// migrate runs Migrate on the engine's own pool.
func (c *core) migrate(ctx context.Context) (MigrateResult, error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return MigrateResult{}, fail("connect", err)
	}
	defer conn.Release()
	return migrateConn(ctx, conn.Conn(), c.schema)
}

// migrateConn applies the pending migrations of schema on conn, under a
// transaction-scoped advisory lock named for the schema.
func migrateConn(ctx context.Context, conn *pgx.Conn, schema string) (MigrateResult, error) {
	all, err := migrations()
	if err != nil {
		return MigrateResult{}, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return MigrateResult{}, fail("migrate", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('chronos migrate ' || $1))`, schema); err != nil {
		return MigrateResult{}, fail("migrate: lock", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
		return MigrateResult{}, fail("migrate: create schema", err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+schema); err != nil {
		return MigrateResult{}, fail("migrate", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS chronos_schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return MigrateResult{}, fail("migrate: versions table", err)
	}
	var from int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM chronos_schema_migrations`).Scan(&from); err != nil {
		return MigrateResult{}, fail("migrate: read version", err)
	}
	res := MigrateResult{From: from, To: from}
	latest := all[len(all)-1].Version
	if from > latest {
		return res, fmt.Errorf("%w: schema %s is at version %d, this binary knows up to %d: run a newer chronos", ErrSchemaNewer, schema, from, latest)
	}
	for _, m := range all[from:] {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return MigrateResult{From: from, To: from}, fail(fmt.Sprintf("migrate: %04d_%s", m.Version, m.Name), err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO chronos_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return MigrateResult{From: from, To: from}, fail("migrate: record version", err)
		}
		res.Applied = append(res.Applied, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		res.To = m.Version
	}
	if err := tx.Commit(ctx); err != nil {
		return MigrateResult{From: from, To: from, Applied: nil}, fail("migrate: commit", err)
	}
	return res, nil
}

// checkVersion refuses a schema other than this binary's.
func (c *core) checkVersion(ctx context.Context) error {
	var v int
	err := c.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM chronos_schema_migrations`).Scan(&v)
	if err != nil {
		if isUndefinedTable(err) {
			return fmt.Errorf("%w: schema %s has no chronos tables: run `chronos nas migrate` (or set the store's migrations to run at start)", ErrSchemaBehind, c.schema)
		}
		return fail("read schema version", err)
	}
	latest := SchemaVersion()
	switch {
	case v > latest:
		return fmt.Errorf("%w: schema %s is at version %d, this binary knows up to %d: run a newer chronos", ErrSchemaNewer, c.schema, v, latest)
	case v < latest:
		return fmt.Errorf("%w: schema %s is at version %d, this binary needs %d: run `chronos nas migrate`", ErrSchemaBehind, c.schema, v, latest)
	}
	return nil
}

// withoutPoolOptions drops the pool's own options (pool_max_conns and the
// other pool_*) from a connection string: a migration runs on one
// connection, and the server would refuse them as unknown parameters.
func withoutPoolOptions(connString string) string {
	u, err := url.Parse(connString)
	if err != nil {
		return connString
	}
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "pool_") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}
