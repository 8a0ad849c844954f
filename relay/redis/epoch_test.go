package redis_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// logBook is a slog handler that keeps the messages logged at each level
// and signals ch on every record.
type logBook struct {
	mu   sync.Mutex
	msgs map[slog.Level][]string
	ch   chan string
}

func newLogBook() *logBook {
	return &logBook{msgs: map[slog.Level][]string{}, ch: make(chan string, 64)}
}

func (h *logBook) Enabled(context.Context, slog.Level) bool { return true }
func (h *logBook) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs[r.Level] = append(h.msgs[r.Level], r.Message)
	h.mu.Unlock()
	select {
	case h.ch <- r.Message:
	default:
	}
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

// openOn opens an engine of prefix on srv that checks the epoch only when
// asked, logging to book.
func openOn(t *testing.T, srv *redistest.Server, prefix string, book *logBook, report time.Duration) *redis.Engine {
	t.Helper()
	e, err := redis.Open(ctxFor(t, 10*time.Second), srv.URL(), redis.Options{
		Prefix: prefix, LostReportFor: report, EpochCheck: -1, Logger: slog.New(book),
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// check runs CheckEpoch and fails the test on an error.
func check(t *testing.T, e *redis.Engine) relay.EpochStatus {
	t.Helper()
	st, err := e.CheckEpoch(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatalf("check epoch: %v", err)
	}
	return st
}

// flushAll empties the server as a restart without persistence does.
func flushAll(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if err := redistest.ClientOf(t, srv.URL()).FlushAll(ctxFor(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("flushall: %v", err)
	}
}

// TestLostStoreIsReportedEverywhereForAWhile empties Redis under two running
// engines: the first to check finds the marker gone and reports the loss,
// the other and an engine opened during the report see it too, each logs it
// once as an error; the report ends after LostReportFor, and a second loss
// after that is found again.
func TestLostStoreIsReportedEverywhereForAWhile(t *testing.T) {
	t.Parallel()
	const report = 1500 * time.Millisecond
	srv := redistest.Start(t, redistest.Options{})
	bookA, bookB, bookC := newLogBook(), newLogBook(), newLogBook()
	a := openOn(t, srv, "p", bookA, report)
	b := openOn(t, srv, "p", bookB, report)
	if st := check(t, a); st.Lost {
		t.Fatalf("a fresh store is reported lost: %+v", st)
	}
	if st := check(t, b); st.Lost {
		t.Fatalf("a fresh store is reported lost to a second engine: %+v", st)
	}
	ctx := ctxFor(t, 30*time.Second)
	if _, err := a.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: "j", FireAt: time.Now().Add(time.Hour), ScheduleID: "s"}); err != nil {
		t.Fatalf("arm: %v", err)
	}

	before := time.Now()
	flushAll(t, srv)
	st := check(t, a)
	if !st.Lost || st.Reason != redis.ReasonMarkerGone {
		t.Fatalf("after FLUSHALL: %+v, want lost, marker gone", st)
	}
	if st.Since.Before(before.Add(-time.Second)) || st.Since.After(time.Now().Add(time.Second)) {
		t.Fatalf("lost since %s, want about now", st.Since)
	}
	if got := st.Until.Sub(st.Since); got < report-100*time.Millisecond || got > report+100*time.Millisecond {
		t.Fatalf("reported for %s, want %s", got, report)
	}
	if st := check(t, a); !st.Lost {
		t.Fatal("the loss is no longer reported at the next check")
	}
	if st := check(t, b); !st.Lost || st.Reason != redis.ReasonMarkerGone {
		t.Fatalf("the other engine sees %+v, want the loss", st)
	}
	c := openOn(t, srv, "p", bookC, report) // opened during the report
	if st := check(t, c); !st.Lost {
		t.Fatalf("an engine opened during the report sees %+v, want the loss", st)
	}
	for name, book := range map[string]*logBook{"a": bookA, "b": bookB, "c": bookC} {
		if n := book.count(slog.LevelError, lostMsg); n != 1 {
			t.Errorf("engine %s logged the loss %d times, want once", name, n)
		}
	}
	// The store is usable again at once (the shard count guard is back too).
	if _, err := a.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: "j", FireAt: time.Now().Add(time.Hour), ScheduleID: "s2"}); err != nil {
		t.Fatalf("arm after the loss: %v", err)
	}
	if _, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: "p", Shards: 8, EpochCheck: -1}); err == nil {
		t.Fatal("the shard count guard is gone after the loss")
	}

	for deadline := time.Now().Add(5 * time.Second); check(t, a).Lost; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the report did not end")
		}
	}
	if n := bookA.count(slog.LevelInfo, clearMsg); n != 1 {
		t.Fatalf("the end of the report was logged %d times, want once", n)
	}
	if st := check(t, b); st.Lost {
		t.Fatalf("the other engine still sees %+v", st)
	}

	flushAll(t, srv)
	if st := check(t, b); !st.Lost || st.Reason != redis.ReasonMarkerGone {
		t.Fatalf("a second loss: %+v, want it found again", st)
	}
	if n := bookB.count(slog.LevelError, lostMsg); n != 2 {
		t.Fatalf("engine b logged %d losses, want 2", n)
	}
}

// TestReplacedMarkerIsALoss: a store emptied while only a new process looked
// at it gets a new marker without a report (the new process cannot tell);
// an engine that knew the old marker finds it replaced and reports the loss.
func TestReplacedMarkerIsALoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	old := openOn(t, srv, "p", newLogBook(), time.Minute)
	flushAll(t, srv)
	fresh := openOn(t, srv, "p", newLogBook(), time.Minute)
	if st := check(t, fresh); st.Lost {
		t.Fatalf("the new process reports %+v; it cannot know", st)
	}
	if st := check(t, old); !st.Lost || st.Reason != redis.ReasonMarkerReplaced {
		t.Fatalf("the process that knew the old marker sees %+v, want replaced", st)
	}
	if st := check(t, fresh); !st.Lost {
		t.Fatalf("the new process does not see the report: %+v", st)
	}
}

// TestLostStoreIsLoggedWithoutAsking: the engine's own periodic check logs
// a lost store even when nobody calls CheckEpoch.
func TestLostStoreIsLoggedWithoutAsking(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	book := newLogBook()
	e, err := redis.Open(ctxFor(t, 10*time.Second), srv.URL(), redis.Options{
		Prefix: "p", EpochCheck: 20 * time.Millisecond, Logger: slog.New(book),
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()
	flushAll(t, srv)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case msg := <-book.ch:
			if msg == lostMsg {
				return
			}
		case <-deadline:
			t.Fatal("the lost store was not logged")
		}
	}
}
