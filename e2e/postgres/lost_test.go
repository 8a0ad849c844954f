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
// running `chronos nas` and `chronos relay` (as a restore without its data
// would): each one's /readyz answers 503 naming store_epoch, its
// chronos_relay_store_lost is 1 and it logs the loss as an error.
func TestEmptiedStoreIsReported(t *testing.T) {
	t.Parallel()
	store := storeOn(t, pgtest.URL(t))
	c := newCluster(t, store, 1)
	nas, nasURL := c.startNAS("nas", "")
	ops := freeAddr(t)
	relay := startProc(t, "relay", c.dir, "relay", "--config", "nas.yaml", "--dispatchers", "1", "--listen", ops)
	waitReady(t, relay, "http://"+ops+contract.PathReadyz, 30*time.Second)
	if _, m := get(t, "http://"+ops+contract.PathMetrics); !strings.Contains(m, "\nchronos_relay_store_lost 0\n") {
		t.Fatal("relay metrics before the tables were emptied lack chronos_relay_store_lost 0")
	}
	emptySchema(t, store)
	for _, target := range []struct {
		p   *proc
		url string
	}{{nas, nasURL}, {relay, "http://" + ops}} {
		code, body := get(t, target.url+contract.PathReadyz)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"store_epoch":"the store lost its data`) {
			t.Fatalf("%s readyz after the tables were emptied: %d %s, want 503 naming store_epoch", target.p.name, code, body)
		}
		if _, m := get(t, target.url+contract.PathMetrics); !strings.Contains(m, "\nchronos_relay_store_lost 1\n") {
			t.Fatalf("%s metrics after the tables were emptied lack chronos_relay_store_lost 1", target.p.name)
		}
		if !strings.Contains(target.p.out.last(1000), `"level":"ERROR","msg":"relay store lost its data`) {
			t.Fatalf("no error log of the lost store from %s:\n%s", target.p.name, target.p.out.last(10))
		}
	}
}
