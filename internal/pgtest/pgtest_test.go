package pgtest_test

import (
	"database/sql"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/chronoscron/chronos/internal/pgtest"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(pgtest.EnvChild); mode != "" {
		os.Exit(pgtest.ChildMain(mode))
	}
	pgtest.Main(m)
}

func TestSharedServerAnswers(t *testing.T) {
	db, err := sql.Open("pgx", pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT 40 + 2").Scan(&n); err != nil || n != 42 {
		t.Fatalf("SELECT 40 + 2 = %d, %v", n, err)
	}
}
