package inputs

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/internal/pgtest"
)

func TestCheckReadQuery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		q    string
		want string // "" when the query is a read
	}{
		{"SELECT url FROM targets", ""},
		{"select url from targets where url <> 'DELETE FROM targets'", ""},
		{`SELECT "update" FROM targets`, ""},
		{"SELECT 1;", ""},
		{"SELECT 1 ;  -- done", ""},
		{"WITH x AS (SELECT 1) SELECT * FROM x", ""},
		{"-- DELETE FROM targets\nSELECT 1", ""},
		{"/* DROP /* nested */ TABLE */ SELECT 1", ""},
		{"SELECT $$DELETE FROM targets$$", ""},
		{"SELECT $tag$it's; DROP$tag$", ""},
		{"SELECT E'it\\'s; DROP'", ""},
		{"SELECT [insert] FROM targets", ""},
		{"VALUES (1), (2)", ""},
		{"TABLE targets", ""},
		{"SELECT n FROM targets WHERE n = $1", ""},
		{"DELETE FROM targets RETURNING url", "starts with DELETE"},
		{"INSERT INTO targets VALUES ('x', 1, 9)", "starts with INSERT"},
		{"UPDATE targets SET n = 0 RETURNING url", "starts with UPDATE"},
		{"DROP TABLE targets", "starts with DROP"},
		{"ATTACH DATABASE 'x.db' AS x", "starts with ATTACH"},
		{"PRAGMA query_only = 0", "starts with PRAGMA"},
		{"REPLACE INTO targets VALUES ('x', 1, 9)", "starts with REPLACE"},
		{"EXPLAIN ANALYZE DELETE FROM targets", "starts with EXPLAIN"},
		{"SELECT 1; DELETE FROM targets", "one statement, not 2"},
		{"SELECT 1;;SELECT 2", "one statement, not 2"},
		{"WITH d AS (DELETE FROM targets RETURNING url) SELECT url FROM d", "has DELETE"},
		{"SELECT url FROM targets FOR UPDATE", "has UPDATE"},
		{"SELECT url INTO copy FROM targets", "has INTO"},
		{"SELECT 1 /* unclosed", "unclosed comment"},
		{"SELECT 'unclosed", "unclosed '"},
		{"SELECT $x$unclosed", "unclosed $x$"},
		{"  ;  ", "no statement"},
	} {
		err := checkReadQuery(tc.q)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", tc.q, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.q, err, tc.want)
		}
	}
}

func TestReadOnlySource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"/var/lib/a.db", "file:/var/lib/a.db?mode=ro&_query_only=1"},
		{"/d/a?b#c%.db", "file:/d/a%3fb%23c%25.db?mode=ro&_query_only=1"},
		{"file:/d/a.db?mode=rwc&_busy_timeout=100", "file:/d/a.db?mode=ro&_query_only=1&_busy_timeout=100"},
		{"file:a.db", "file:a.db?mode=ro&_query_only=1"},
	} {
		if got := readOnlySource(DSN{Driver: DriverSQLite, Source: tc.in}); got != tc.want {
			t.Errorf("readOnlySource(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	pg := "postgres://u@h/db"
	if got := readOnlySource(DSN{Driver: DriverPostgres, Source: pg}); got != pg {
		t.Errorf("a PostgreSQL source changed: %q", got)
	}
}

// TestSQLConnectionCannotWrite runs writes past the statement check,
// straight on the connection an input reads through, on SQLite and on
// PostgreSQL: each fails, and the table keeps its rows.
func TestSQLConnectionCannotWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lite := filepath.Join(dir, "t.db")
	dsns := map[string]DSN{
		"lite": {Driver: DriverSQLite, Source: lite},
		"pg":   {Driver: DriverPostgres, Source: pgtest.URL(t)},
	}
	for name, d := range dsns {
		t.Run(name, func(t *testing.T) {
			table := "ro_" + name
			db, err := sql.Open(d.Driver, d.Source)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, q := range []string{
				"DROP TABLE IF EXISTS " + table,
				"CREATE TABLE " + table + " (url TEXT, n INTEGER)",
				"INSERT INTO " + table + " VALUES ('https://a.example', 1), ('https://b.example', 2)",
			} {
				if _, err := db.ExecContext(t.Context(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			r := &SQLResolver{DSNs: dsns}
			writes := []string{
				"DELETE FROM " + table + " RETURNING url",
				"INSERT INTO " + table + " VALUES ('https://c.example', 3) RETURNING url",
				"UPDATE " + table + " SET url = 'x' RETURNING url",
				"CREATE TABLE " + table + "_new (x TEXT)",
				"DROP TABLE " + table,
			}
			if name == "lite" {
				writes = append(writes, "ATTACH DATABASE '"+filepath.Join(dir, "attached.db")+"' AS a")
			}
			for _, q := range writes {
				if got, err := r.query(t.Context(), name, d, q); err == nil {
					t.Errorf("%s ran on the input's connection: %q", q, got)
				}
			}
			var n int
			if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM "+table+" WHERE url LIKE 'https://%'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 2 {
				t.Fatalf("the table has %d of its 2 rows after the writes", n)
			}
			if _, err := os.Stat(filepath.Join(dir, "attached.db")); err == nil {
				t.Fatal("ATTACH created a database file")
			}
			got, err := r.query(t.Context(), name, d, "SELECT url FROM "+table+" ORDER BY n")
			if err != nil || len(got) != 2 {
				t.Fatalf("a read after the writes: %q, %v", got, err)
			}
		})
	}
}
