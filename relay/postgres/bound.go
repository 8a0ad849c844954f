package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chronoscron/chronos/relay"
)

// db is the engine's connection pool whose statements are each bounded by
// the call timeout of their context (relay.WithCallTimeout): a server that
// stops answering (stopped, frozen, cut off) fails the call at that bound,
// with an error that wraps relay.ErrUnavailable, instead of holding its
// caller until the server comes back.
type db struct{ *pgxpool.Pool }

// bound returns ctx bounded by its call timeout, if it carries one.
func bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := relay.CallTimeout(ctx); ok {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

// Exec runs a statement within the call timeout.
func (d db) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	return d.Pool.Exec(ctx, sql, args...)
}

// Query runs a query within the call timeout, which ends when its rows are
// closed.
func (d db) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	ctx, cancel := bound(ctx)
	rows, err := d.Pool.Query(ctx, sql, args...)
	if err != nil {
		cancel()
		return nil, err
	}
	return boundRows{Rows: rows, cancel: cancel}, nil
}

// QueryRow runs a query of one row within the call timeout, which ends
// when the row is scanned.
func (d db) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	ctx, cancel := bound(ctx)
	return boundRow{row: d.Pool.QueryRow(ctx, sql, args...), cancel: cancel}
}

// boundRows are rows whose call timeout ends when they are closed.
type boundRows struct {
	pgx.Rows
	cancel context.CancelFunc
}

// Close closes the rows and ends their call timeout.
func (r boundRows) Close() {
	r.Rows.Close()
	r.cancel()
}

// boundRow is a row whose call timeout ends when it is scanned.
type boundRow struct {
	row    pgx.Row
	cancel context.CancelFunc
}

// Scan reads the row and ends its call timeout.
func (r boundRow) Scan(dest ...any) error {
	defer r.cancel()
	return r.row.Scan(dest...)
}
