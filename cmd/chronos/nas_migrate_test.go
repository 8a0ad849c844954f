package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/internal/pgtest"
	"github.com/chronoscron/chronos/relay/postgres"
)

// pgSchemas counts the schemas this test binary made.
var pgSchemas atomic.Int64

// pgStore returns a store URL on the tests' PostgreSQL in a schema no other
// test of any binary uses (it does not exist yet), and the schema's name.
func pgStore(t *testing.T) (store, schema string) {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	schema = fmt.Sprintf("t_%d_%d", os.Getpid(), pgSchemas.Add(1))
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// pgExec runs one statement on the tests' PostgreSQL.
func pgExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// pgVersion is the schema version recorded in schema, 0 when it has none.
func pgVersion(t *testing.T, schema string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v int
	err = conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+pgx.Identifier{schema, "chronos_schema_migrations"}.Sanitize()).Scan(&v)
	if err != nil && !strings.Contains(err.Error(), "does not exist") {
		t.Fatal(err)
	}
	return v
}

// migrateConfig writes a config of NAS on store (and an agents file beside
// it) and returns its path.
func migrateConfig(t *testing.T, store, extra string) string {
	t.Helper()
	dir := t.TempDir()
	nasWriteFile(t, filepath.Join(dir, "agents.yaml"), "- agent_id: a\n  instance_id: i\n  token_sha256: "+strings.Repeat("0", 64)+"\n")
	path := filepath.Join(dir, "nas.yaml")
	nasWriteFile(t, path, fmt.Sprintf("listen: 127.0.0.1:0\npublic_url: http://127.0.0.1:1\nagents_file: agents.yaml\nstore: %q\n%srelay:\n  secrets: [%s]\n  dispatchers: 0\n",
		store, extra, nasTestSecret))
	return path
}

// TestNASMigrateCLI: chronos nas migrate applies the schema once and then
// has nothing to do, says so as text and as JSON, takes the pool's options
// in the URL, and refuses a database a newer binary wrote (exit 1, the
// database untouched).
func TestNASMigrateCLI(t *testing.T) {
	t.Parallel()
	store, schema := pgStore(t)
	cfg := migrateConfig(t, store+"&pool_max_conns=4", "")
	latest := postgres.SchemaVersion()
	if latest < 1 {
		t.Fatalf("the binary has no migrations (version %d)", latest)
	}

	code, out, errOut := nasRunCLI(t, "nas", "migrate", "--config", cfg)
	want := fmt.Sprintf("schema %s: version 0 → %d (applied 0001_queue", schema, latest)
	if code != exitOK || !strings.HasPrefix(out, want) || !strings.HasSuffix(out, ")\n") {
		t.Fatalf("first run: exit %d, stdout %q (want %q…), stderr %s", code, out, want, errOut)
	}
	if v := pgVersion(t, schema); v != latest {
		t.Fatalf("after the first run the schema is at version %d, want %d", v, latest)
	}

	code, out, errOut = nasRunCLI(t, "nas", "migrate", "--config", cfg)
	if want := fmt.Sprintf("schema %s: at version %d, nothing to do\n", schema, latest); code != exitOK || out != want {
		t.Fatalf("second run: exit %d, stdout %q, want %q; stderr %s", code, out, want, errOut)
	}
	code, out, errOut = nasRunCLI(t, "nas", "migrate", "--config", cfg, "--json")
	var m struct {
		Store, Schema string
		From, To      int
		Applied       []string
	}
	if err := decodeOne(out, &m); err != nil || code != exitOK || m.Store != "postgres" || m.Schema != schema ||
		m.From != latest || m.To != latest || m.Applied == nil || len(m.Applied) != 0 {
		t.Fatalf("--json: exit %d, %+v %v:\n%s\nstderr: %s", code, m, err, out, errOut)
	}

	pgExec(t, "INSERT INTO "+pgx.Identifier{schema, "chronos_schema_migrations"}.Sanitize()+" (version, name) VALUES (999, 'future')")
	code, out, errOut = nasRunCLI(t, "nas", "migrate", "--config", cfg)
	if code == exitOK || code == exitUsage || out != "" || !strings.Contains(errOut, "newer than this binary") || !strings.Contains(errOut, "999") {
		t.Fatalf("a newer database: exit %d, stdout %q, stderr %q; want exit 1 and the refusal", code, out, errOut)
	}
	if v := pgVersion(t, schema); v != 999 {
		t.Fatalf("the refused database's version is now %d", v)
	}
}

// TestNASMigrateOtherStores: a store without a schema has nothing to
// migrate (exit 0, nothing reached); one that cannot be reached fails
// (exit 1); bad usage is exit 2.
func TestNASMigrateOtherStores(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, store string
		code        int
		out, err    string
	}{
		{"memory", "memory", exitOK, "store memory: no schema, nothing to migrate\n", ""},
		{"redis", "redis://127.0.0.1:1/0", exitOK, "store redis: no schema, nothing to migrate\n", ""},
		{"unreachable", "postgres://chronos@127.0.0.1:1/chronos?sslmode=disable&connect_timeout=5", exitFailure, "", "connect"},
		{"bad URL", "postgres://db/chronos?schema=Bad", exitUsage, "", "schema="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := nasRunCLI(t, "nas", "migrate", "--config", migrateConfig(t, tc.store, ""))
			if code != tc.code || out != tc.out || !strings.Contains(errOut, tc.err) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, %q, %q", code, out, errOut, tc.code, tc.out, tc.err)
			}
		})
	}
	if code, _, errOut := nasRunCLI(t, "nas", "migrate", "--config", migrateConfig(t, "memory", ""), "--timeout", "0s"); code != exitUsage || !strings.Contains(errOut, "--timeout") {
		t.Errorf("--timeout 0s: exit %d, %q", code, errOut)
	}
	if code, _, errOut := nasRunCLI(t, "nas", "migrate", "extra"); code != exitUsage {
		t.Errorf("a stray argument: exit %d, %q", code, errOut)
	}
}

// TestNASStartsOnlyOnAMigratedSchema: without store_migrate, chronos nas and
// chronos relay on an empty schema exit 1 naming chronos nas migrate; with
// it, NAS migrates the schema as it starts.
func TestNASStartsOnlyOnAMigratedSchema(t *testing.T) {
	t.Parallel()
	store, schema := pgStore(t)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, []string{"nas", "--config", migrateConfig(t, store, "")}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "chronos nas migrate") {
		t.Fatalf("nas on an empty schema: exit %d, stderr:\n%s", code, stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	code = run(ctx, []string{"relay", "--config", migrateConfig(t, store, ""), "--dispatchers", "1"}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "chronos nas migrate") {
		t.Fatalf("relay on an empty schema: exit %d, stderr:\n%s", code, stderr.String())
	}
	if v := pgVersion(t, schema); v != 0 {
		t.Fatalf("nas and relay without store_migrate wrote schema version %d", v)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan int, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, []string{"nas", "--config", migrateConfig(t, store, "store_migrate: true\n")}, io.Discard, &nasLockedWriter{w: &logs})
	}()
	latest := postgres.SchemaVersion()
	deadline := time.Now().Add(20 * time.Second)
	for pgVersion(t, schema) != latest {
		select {
		case <-done:
			t.Fatalf("nas with store_migrate ended before the schema was at version %d:\n%s", latest, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nas with store_migrate: the schema never reached version %d:\n%s", latest, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("nas did not stop")
	}
}
