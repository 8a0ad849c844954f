package inputs

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
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
// URL's raw query, unescaped; only registered names are reachable.
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
	return q, nil
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
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = FetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := sql.Open(d.Driver, d.Source)
	if err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", u.Host, err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", u.Host, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", u.Host, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("inputs: sql %s: the query returns no column", u.Host)
	}
	var out []string
	dest := make([]any, len(cols))
	for i := range dest {
		dest[i] = new(any)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("inputs: sql %s: %w", u.Host, err)
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
			return nil, fmt.Errorf("inputs: sql %s: more than %d rows", u.Host, MaxItems)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inputs: sql %s: %w", u.Host, err)
	}
	return out, nil
}
