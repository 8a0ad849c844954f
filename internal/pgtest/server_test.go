package pgtest_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/pgtest"
)

// TestServerStopsStartsAndPauses: a row committed before each stop (fast,
// then immediate) is there after the start, on the same URL; while the
// server is stopped or paused a query fails within its deadline, and it
// answers again once started or resumed.
func TestServerStopsStartsAndPauses(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	url := srv.URL()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(0) // each query on a new connection, as after a restart
	exec := func(q string, args ...any) error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := db.ExecContext(ctx, q, args...)
		return err
	}
	count := func() int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n
	}
	if err := exec("CREATE TABLE kept (n int)"); err != nil {
		t.Fatal(err)
	}
	for i, mode := range []pgtest.StopMode{pgtest.Fast, pgtest.Immediate} {
		if err := exec("INSERT INTO kept VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
		pid := srv.Pid()
		if err := srv.Stop(mode); err != nil {
			t.Fatalf("stop -m %s: %v", mode, err)
		}
		if srv.Pid() != 0 {
			t.Fatalf("after stop -m %s Pid is %d, want 0", mode, srv.Pid())
		}
		if err := exec("SELECT 1"); err == nil {
			t.Fatalf("a query succeeded while the server was stopped (-m %s)", mode)
		}
		if err := srv.Start(); err != nil {
			t.Fatalf("start after stop -m %s: %v", mode, err)
		}
		if srv.URL() != url || srv.Pid() == pid || srv.Pid() == 0 {
			t.Fatalf("after the start: URL %s (was %s), postmaster %d (was %d)", srv.URL(), url, srv.Pid(), pid)
		}
		if n := count(); n != i+1 {
			t.Fatalf("after stop -m %s and start: %d rows, want %d", mode, n, i+1)
		}
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := exec("SELECT 1"); err == nil {
		t.Fatal("a query succeeded while the server was paused")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a query on the paused server failed after %s, not at its 500ms deadline", took)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("after resume: %d rows, want 2", n)
	}
}
