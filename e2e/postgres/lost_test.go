package postgrese2e

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/pgtest"
)

// emptySchema empties every table of the store's schema but the record of
// its migrations, as a restore of an empty dump would.
func emptySchema(t *testing.T, store string) {
	t.Helper()
	u, err := url.Parse(store)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("schema")
	q.Del("schema")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var tables []string
	rows, err := conn.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name <> 'chronos_schema_migrations'`, schema)
	if err == nil {
		tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(tables) == 0 {
		t.Fatalf("tables of %s: %v %v", schema, tables, err)
	}
	if _, err := conn.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")); err != nil {
		t.Fatalf("truncate: %v", err)
	}
}

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// TestEmptiedStoreIsReported empties the tables of the schema under a
// running `chronos nas` (as a restore without its data would): /readyz
// answers 503 naming store_epoch, chronos_relay_store_lost is 1 and NAS logs
// the loss as an error.
func TestEmptiedStoreIsReported(t *testing.T) {
	t.Parallel()
	store := storeOn(t, pgtest.URL(t))
	c := newCluster(t, store, 1)
	p, nasURL := c.startNAS("nas", "")
	emptySchema(t, store)
	code, body := get(t, nasURL+contract.PathReadyz)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"store_epoch":"the store lost its data`) {
		t.Fatalf("readyz after the tables were emptied: %d %s, want 503 naming store_epoch", code, body)
	}
	if _, m := get(t, nasURL+contract.PathMetrics); !strings.Contains(m, "\nchronos_relay_store_lost 1\n") {
		t.Fatalf("metrics after the tables were emptied lack chronos_relay_store_lost 1")
	}
	if !strings.Contains(p.out.last(1000), `"level":"ERROR","msg":"relay store lost its data`) {
		t.Fatalf("no error log of the lost store:\n%s", p.out.last(10))
	}
}
