package inputs

// The SQL drivers of sql:// inputs: SQLite in pure Go (no cgo, so the
// agent stays one static binary) and PostgreSQL through pgx's database/sql
// adapter.
import (
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)
