package inputs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"modernc.org/sqlite"
)

// SQL drivers a registered DSN may name.
const (
	// DriverSQLite is SQLite through a pure-Go driver; the source is a file
	// path or a file: URI.
	DriverSQLite = "sqlite"
	// DriverPostgres is PostgreSQL through pgx; the source is a
	// postgres:// URL or a key=value connection string.
	DriverPostgres = "pgx"
)

// DSN is one database registered in the agent's configuration.
type DSN struct {
	Driver string
	Source string
}

// dsnName is the syntax of a registered database name.
var dsnName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ParseDSN reads a registered database: "sqlite:PATH",
// "postgres://..." or "postgresql://..." (pgx).
func ParseDSN(name, value string) (DSN, error) {
	if !dsnName.MatchString(name) {
		return DSN{}, fmt.Errorf("sql dsn name %q must match %s", name, dsnName)
	}
	v := strings.TrimSpace(value)
	switch {
	case strings.HasPrefix(v, "sqlite:"):
		src := strings.TrimPrefix(v, "sqlite:")
		if src == "" {
			return DSN{}, fmt.Errorf("sql dsn %s: sqlite needs a path (sqlite:/path/to/db)", name)
		}
		return DSN{Driver: DriverSQLite, Source: src}, nil
	case strings.HasPrefix(v, "postgres://"), strings.HasPrefix(v, "postgresql://"):
		return DSN{Driver: DriverPostgres, Source: v}, nil
	}
	return DSN{}, fmt.Errorf("sql dsn %s: want sqlite:PATH or postgres://... ", name)
}

// SQLResolver runs sql://NAME?QUERY against the database registered as
// NAME and takes the first column of each row, as text. The query is the
// URL's raw query, unescaped; only registered names are reachable, and
// only to read: the query must be one statement that reads (checked at
// jobs add and again before it runs), and it runs on a connection that
// cannot write (SQLite opened read-only with query_only, PostgreSQL in a
// read-only transaction).
type SQLResolver struct {
	DSNs    map[string]DSN
	Timeout time.Duration
}

func sqlQuery(u *url.URL) (string, error) {
	q, err := url.QueryUnescape(u.RawQuery)
	if err != nil {
		q = u.RawQuery
	}
	q = strings.TrimSpace(q)
	if q == "" {
		return "", fmt.Errorf("%w: %s: no query (sql://NAME?SELECT ...)", ErrInvalid, u.Redacted())
	}
	if err := checkReadQuery(q); err != nil {
		return "", fmt.Errorf("%w: sql://%s: %w", ErrInvalid, u.Host, err)
	}
	return q, nil
}

// readOnlySource is d's source opened so that nothing can write through
// it: SQLite in read-only mode with query_only set (and readsOnly as its
// authorizer, see query);
// PostgreSQL's queries run in a read-only transaction instead (see
// Resolve).
func readOnlySource(d DSN) string {
	if d.Driver != DriverSQLite {
		return d.Source
	}
	src, query := d.Source, ""
	if rest, ok := strings.CutPrefix(src, "file:"); ok {
		src, query, _ = strings.Cut(rest, "?")
	} else {
		// A plain path: escaped as a URI filename needs.
		src = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(src)
	}
	params := []string{"mode=ro", "_query_only=1"}
	for _, p := range strings.Split(query, "&") {
		// The caller's own mode (rw, rwc) gives way to ro.
		if p != "" && !strings.HasPrefix(p, "mode=") && !strings.HasPrefix(p, "_query_only=") {
			params = append(params, p)
		}
	}
	return "file:" + src + "?" + strings.Join(params, "&")
}

// Check requires a registered name and a query.
func (r *SQLResolver) Check(_ context.Context, u *url.URL) error {
	if _, ok := r.DSNs[u.Host]; !ok {
		return fmt.Errorf("%w: sql database %q is not registered in the agent's configuration (sql.dsns)", ErrInvalid, u.Host)
	}
	if u.Path != "" && u.Path != "/" {
		return fmt.Errorf("%w: sql://%s: no path allowed before the query", ErrInvalid, u.Host)
	}
	_, err := sqlQuery(u)
	return err
}

// Resolve runs the query.
func (r *SQLResolver) Resolve(ctx context.Context, u *url.URL) ([]string, error) {
	d := r.DSNs[u.Host]
	q, err := sqlQuery(u)
	if err != nil {
		return nil, err
	}
	return r.query(ctx, u.Host, d, q)
}

// query runs q on the database d registered as name, read-only, and takes
// the first column of each row.
func (r *SQLResolver) query(ctx context.Context, name string, d DSN, q string) ([]string, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = FetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := sql.Open(d.Driver, readOnlySource(d))
	if err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", name, err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", name, err)
	}
	defer conn.Close()
	if d.Driver == DriverSQLite {
		if err := conn.Raw(authorizeReads); err != nil {
			return nil, fmt.Errorf("inputs: sql %s: %w", name, err)
		}
	}
	// One read-only transaction, never committed: PostgreSQL refuses any
	// write in it; SQLite's connection is read-only already.
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: d.Driver == DriverPostgres})
	if err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", name, err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", name, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", name, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("inputs: sql %s: the query returns no column", name)
	}
	var out []string
	dest := make([]any, len(cols))
	for i := range dest {
		dest[i] = new(any)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("inputs: sql %s: %w", name, err)
		}
		v := *(dest[0].(*any))
		var s string
		switch x := v.(type) {
		case nil:
			continue
		case []byte:
			s = string(x)
		default:
			s = fmt.Sprint(x)
		}
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
		if len(out) > MaxItems {
			return nil, fmt.Errorf("inputs: sql %s: more than %d rows", name, MaxItems)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", name, err)
	}
	return out, nil
}

// authorizeReads installs readsOnly as the authorizer of a SQLite
// connection (a database/sql Conn.Raw callback).
func authorizeReads(driverConn any) error {
	a, ok := driverConn.(sqlite.AuthorizerRegisterer)
	if !ok {
		return errors.New("the SQLite driver takes no authorizer")
	}
	return a.RegisterAuthorizer(readsOnly)
}

// readsOnly is the SQLite authorizer of an input's connection, the third
// lock beside read-only mode and query_only: a statement may read tables,
// call functions, recurse and run in the transaction the input opens;
// anything else (ATTACH, which read-only mode does not cover, a PRAGMA,
// any change) fails to compile.
func readsOnly(action sqlite.AuthorizerActionCode, _, _, _, _ string) sqlite.AuthorizerReturnCode {
	switch action {
	case sqlite.AuthRead, sqlite.AuthSelect, sqlite.AuthFunction, sqlite.AuthRecursive, sqlite.AuthTransaction:
		return sqlite.AuthorizerOK
	}
	return sqlite.AuthorizerDeny
}
