package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/pgtest"
	"github.com/chronoscron/chronos/relay"
)

// logBook is a slog handler that keeps the messages logged at each level.
type logBook struct {
	mu   sync.Mutex
	msgs map[slog.Level][]string
}

func newLogBook() *logBook { return &logBook{msgs: map[slog.Level][]string{}} }

func (h *logBook) Enabled(context.Context, slog.Level) bool { return true }
func (h *logBook) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs[r.Level] = append(h.msgs[r.Level], r.Message)
	return nil
}
func (h *logBook) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logBook) WithGroup(string) slog.Handler      { return h }

// count returns how often msg was logged at level.
func (h *logBook) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs[level] {
		if m == msg {
			n++
		}
	}
	return n
}

const (
	lostMsg  = "relay store lost its data: armed fires may be gone; agents arm theirs again when they next reconcile"
	clearMsg = "relay store loss no longer reported"
)

// epochSchemas counts the schemas the epoch tests made.
var epochSchemas atomic.Int64

// epochSetup is what an epoch test works with: a schema of its own and a
// connection to change its tables behind the engines' backs.
type epochSetup struct {
	schema string
	report time.Duration
}

func newEpochSetup(t *testing.T, report time.Duration) epochSetup {
	t.Helper()
	return epochSetup{schema: fmt.Sprintf("ep%d_%d", os.Getpid(), epochSchemas.Add(1)), report: report}
}

// open opens an engine of the setup's schema that checks the epoch only
// when asked, logging to book.
func (s epochSetup) open(t *testing.T, book *logBook) *Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := Open(ctx, pgtest.URL(t), Options{Schema: s.schema, Migrate: true, Logger: slog.New(book),
		LostReportFor: s.report, EpochCheck: -1})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// exec runs sql on the setup's schema through e's pool.
func (s epochSetup) exec(t *testing.T, e *Engine, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.pool.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// check runs CheckEpoch and fails the test on an error.
func check(t *testing.T, e *Engine) relay.EpochStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := e.CheckEpoch(ctx)
	if err != nil {
		t.Fatalf("check epoch: %v", err)
	}
	return st
}

// TestEpochMarkerGone deletes the epoch marker under two running engines:
// the first to check finds it gone and reports the loss, the other and an
// engine opened during the report see it too, each logs it once as an
// error; the report ends after LostReportFor and each says so once.
func TestEpochMarkerGone(t *testing.T) {
	t.Parallel()
	const report = 1500 * time.Millisecond
	s := newEpochSetup(t, report)
	bookA, bookB, bookC := newLogBook(), newLogBook(), newLogBook()
	a, b := s.open(t, bookA), s.open(t, bookB)
	for name, e := range map[string]*Engine{"a": a, "b": b} {
		if st := check(t, e); st.Lost {
			t.Fatalf("a fresh store is reported lost to %s: %+v", name, st)
		}
	}

	before := time.Now()
	s.exec(t, a, `DELETE FROM chronos_meta`)
	st := check(t, b)
	if !st.Lost || st.Reason != ReasonMarkerGone {
		t.Fatalf("after the marker's delete: %+v, want lost, marker gone", st)
	}
	if st.Since.Before(before.Add(-time.Second)) || st.Since.After(time.Now().Add(time.Second)) {
		t.Fatalf("lost since %s, want about now", st.Since)
	}
	if got := st.Until.Sub(st.Since); got != report {
		t.Fatalf("reported for %s, want %s", got, report)
	}
	if st := check(t, b); !st.Lost {
		t.Fatal("the loss is no longer reported at the next check")
	}
	if st := check(t, a); !st.Lost || st.Reason != ReasonMarkerGone {
		t.Fatalf("the other engine sees %+v, want the loss, marker gone", st)
	}
	c := s.open(t, bookC) // opened during the report
	if st := check(t, c); !st.Lost {
		t.Fatalf("an engine opened during the report sees %+v, want the loss", st)
	}
	for name, book := range map[string]*logBook{"a": bookA, "b": bookB, "c": bookC} {
		if n := book.count(slog.LevelError, lostMsg); n != 1 {
			t.Errorf("engine %s logged the loss %d times, want once", name, n)
		}
	}

	for deadline := time.Now().Add(10 * time.Second); check(t, a).Lost; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the loss is still reported long after LostReportFor")
		}
	}
	for name, e := range map[string]*Engine{"b": b, "c": c} {
		if st := check(t, e); st.Lost {
			t.Fatalf("engine %s still sees the loss: %+v", name, st)
		}
	}
	for name, book := range map[string]*logBook{"a": bookA, "b": bookB, "c": bookC} {
		if n := book.count(slog.LevelInfo, clearMsg); n != 1 {
			t.Errorf("engine %s logged the end of the report %d times, want once", name, n)
		}
	}
}

// TestEpochMarkerReplaced replaces the epoch marker (data restored from
// elsewhere): every engine that knew the old one reports the loss, as
// replaced; one opened afterwards adopts the new marker and sees the
// report while it lasts.
func TestEpochMarkerReplaced(t *testing.T) {
	t.Parallel()
	s := newEpochSetup(t, time.Minute)
	a, b := s.open(t, newLogBook()), s.open(t, newLogBook())
	s.exec(t, a, `UPDATE chronos_meta SET value = 'ep_restored' WHERE name = 'epoch'`)
	for name, e := range map[string]*Engine{"a": a, "b": b} {
		if st := check(t, e); !st.Lost || st.Reason != ReasonMarkerReplaced {
			t.Fatalf("engine %s after the marker was replaced: %+v, want lost, replaced", name, st)
		}
	}
	c := s.open(t, newLogBook())
	if st := check(t, c); !st.Lost || st.Reason != ReasonMarkerReplaced {
		t.Fatalf("an engine opened during the report sees %+v, want the loss", st)
	}
	// The report is not made again by every check: it started once.
	first := check(t, a).Since
	if again := check(t, b).Since; !again.Equal(first) {
		t.Fatalf("the report started at %s, then at %s", first, again)
	}
}

// TestEpochMarkerKept: checks on a store that keeps its data report
// nothing, and the marker stays the one written first.
func TestEpochMarkerKept(t *testing.T) {
	t.Parallel()
	s := newEpochSetup(t, time.Minute)
	a := s.open(t, newLogBook())
	b := s.open(t, newLogBook())
	for range 3 {
		for _, e := range []*Engine{a, b} {
			if st := check(t, e); st.Lost {
				t.Fatalf("a store that kept its data is reported lost: %+v", st)
			}
		}
	}
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM chronos_meta WHERE name = 'epoch'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("epoch markers: %d, %v; want 1", n, err)
	}
}

// TestEpochLossLoggedWithoutAsking: an engine checks the marker by itself
// every Options.EpochCheck, so a loss is logged though nobody calls
// CheckEpoch.
func TestEpochLossLoggedWithoutAsking(t *testing.T) {
	t.Parallel()
	s := newEpochSetup(t, time.Minute)
	book := newLogBook()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := Open(ctx, pgtest.URL(t), Options{Schema: s.schema, Migrate: true, Logger: slog.New(book),
		EpochCheck: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	s.exec(t, e, `DELETE FROM chronos_meta`)
	for book.count(slog.LevelError, lostMsg) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the loss was never logged")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
