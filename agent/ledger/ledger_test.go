package ledger

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var day = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

func entry(run string, s State, at time.Time, token uint64) Entry {
	return Entry{Time: at, RunID: run, JobID: "j", State: s, Slot: day, Trigger: "scheduled", Attempt: 1, Token: token}
}

func TestFoldByRunID(t *testing.T) {
	t.Parallel()
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lines := []Entry{
		entry("a", StateClaimed, day, 1),
		entry("b", StateClaimed, day.Add(time.Second), 2),
		entry("a", StateRunning, day.Add(2*time.Second), 1),
		// b was replaced before its running line was written
		entry("b", StateInterrupted, day.Add(3*time.Second), 2),
		entry("b", StateRunning, day.Add(4*time.Second), 2),
		{Time: day.Add(5 * time.Second), RunID: "b", JobID: "j", State: StateSucceeded, Token: 2, Discarded: true, Reason: "completion discarded"},
		entry("a", StateSucceeded, day.Add(24*time.Hour), 1), // next day's file
		// c: interrupted, then retried with a new token
		entry("c", StateClaimed, day.Add(25*time.Hour), 3),
		entry("c", StateInterrupted, day.Add(25*time.Hour+time.Second), 3),
		entry("c", StateClaimed, day.Add(25*time.Hour+2*time.Second), 4),
		entry("c", StateSucceeded, day.Add(25*time.Hour+3*time.Second), 4),
	}
	for _, e := range lines {
		if err := l.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := l.Runs(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]State{"a": StateSucceeded, "b": StateInterrupted, "c": StateSucceeded}
	if len(runs) != 3 {
		t.Fatalf("runs %+v", runs)
	}
	for _, r := range runs {
		if r.State != want[r.RunID] {
			t.Errorf("run %s: %s, want %s (states %v)", r.RunID, r.State, want[r.RunID], r.States)
		}
	}
	if runs[0].RunID != "a" || len(runs[0].States) != 3 {
		t.Fatalf("run a folded across days: %+v", runs[0])
	}
	if got, _ := l.Runs(ctx, Filter{Limit: 1}); len(got) != 1 || got[0].RunID != "c" {
		t.Fatalf("limit keeps the newest: %+v", got)
	}
	if got, _ := l.Runs(ctx, Filter{Since: day.Add(12 * time.Hour)}); len(got) != 1 || got[0].RunID != "c" {
		t.Fatalf("since: %+v", got)
	}
	files, _ := filepath.Glob(filepath.Join(l.Dir(), "*.jsonl"))
	if len(files) != 2 {
		t.Fatalf("day files %v", files)
	}
}

func TestAppendIsWholeLines(t *testing.T) {
	t.Parallel()
	l, _ := Open(t.TempDir())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				e := entry(string(rune('a'+w)), StateClaimed, day, uint64(i))
				e.Reason = string(make([]byte, 0, 1)) + "padding padding padding padding padding padding"
				if err := l.Append(context.Background(), e); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	es, err := l.Entries(context.Background(), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 400 {
		t.Fatalf("%d lines, want 400", len(es))
	}
}

func TestTornLastLineIsIgnored(t *testing.T) {
	t.Parallel()
	l, _ := Open(t.TempDir())
	ctx := context.Background()
	if err := l.Append(ctx, entry("a", StateClaimed, day, 1)); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(l.Dir(), "2026-06-01.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"time":"2026-06-01T09:00:01Z","run_id":"b","sta`)
	f.Close()
	es, err := l.Entries(ctx, Filter{})
	if err != nil || len(es) != 1 {
		t.Fatalf("entries %v %v", es, err)
	}
	if err := l.Append(ctx, Entry{}); err == nil {
		t.Fatal("appended an empty entry")
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	l, _ := Open(filepath.Join(home, "runs"))
	ctx := context.Background()
	for d := range 5 {
		if err := l.Append(ctx, entry("r", StateClaimed, day.Add(time.Duration(d)*24*time.Hour), 1)); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(home, "output", "j")
	os.MkdirAll(out, 0o700)
	old, fresh := filepath.Join(out, "old.log"), filepath.Join(out, "fresh.log")
	os.WriteFile(old, []byte("x"), 0o600)
	os.WriteFile(fresh, []byte("x"), 0o600)
	now := day.Add(4 * 24 * time.Hour)
	os.Chtimes(old, now.Add(-72*time.Hour), now.Add(-72*time.Hour))
	os.Chtimes(fresh, now, now)
	n, err := l.Prune(ctx, now, 48*time.Hour, filepath.Join(home, "output"))
	if err != nil {
		t.Fatal(err)
	}
	days, _ := l.days()
	if n != 3 || len(days) != 3 || days[0] != "2026-06-03" {
		t.Fatalf("removed %d, days left %v", n, days)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatal("old output kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatal("fresh output removed")
	}
}

// Notification lines name a run but never fold into it: the run keeps its
// end, and a notification of a run outside the filter adds no run.
func TestNotificationLinesDoNotFold(t *testing.T) {
	t.Parallel()
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	note := func(run string, s State, at time.Time) Entry {
		return Entry{Time: at, RunID: run, JobID: "j", State: s, Slot: day, Kind: KindNotification,
			Notification: "ntf_" + run, Event: "failed", Target: "file /tmp/x"}
	}
	for _, e := range []Entry{
		entry("a", StateClaimed, day, 1),
		entry("a", StateFailed, day.Add(time.Second), 1),
		note("a", StateSent, day.Add(2*time.Second)),
		note("gone", StateDead, day.Add(3*time.Second)),
	} {
		if err := l.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := l.Runs(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].State != StateFailed || len(runs[0].States) != 2 {
		t.Fatalf("runs %+v, want a alone, failed", runs)
	}
	es, err := l.Entries(ctx, Filter{})
	if err != nil || len(es) != 4 || es[2].Notification != "ntf_a" || es[3].State != StateDead {
		t.Fatalf("entries %+v %v", es, err)
	}
}

// TestAppendSeveral: entries appended together are written in order, those
// of one day file with one write and one sync, those of another day to
// their own file; each is told to observers (and to a follower of the
// directory) once; an invalid entry among them writes none.
func TestAppendSeveral(t *testing.T) {
	t.Parallel()
	this, other, rec := followed(t)
	this.ObserveAll(rec.see)
	ctx := context.Background()
	next := day.Add(24 * time.Hour)
	err := this.Append(ctx, entry("a", StateClaimed, day, 1), entry("a", StateRunning, day, 1), entry("b", StateClaimed, day, 2))
	if err != nil {
		t.Fatal(err)
	}
	s := this.syncs.file(this.dayFile(day))
	s.mu.Lock()
	writes, covered := s.written, s.covered
	s.mu.Unlock()
	if writes != 1 || covered != 1 {
		t.Fatalf("one day's three lines took %d writes and %d synced, want one of each", writes, covered)
	}
	if err := this.Append(ctx, entry("b", StateSucceeded, day, 2), entry("c", StateClaimed, next, 3)); err != nil {
		t.Fatal(err)
	}
	told := []string{"a/claimed", "a/running", "b/claimed", "b/succeeded", "c/claimed"}
	wantLines(t, "observers", rec.got(), told...)
	mustFollow(t, this)
	mustAppend(t, other, entry("d", StateClaimed, day, 4))
	mustFollow(t, this)
	wantLines(t, "after Follow", rec.got(), append(told, "d/claimed")...)

	if err := this.Append(ctx, entry("e", StateClaimed, day, 5), Entry{RunID: "f"}); err == nil {
		t.Fatal("appended entries with an invalid one among them")
	}
	es, err := this.Entries(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.RunID+"/"+string(e.State))
	}
	wantLines(t, "the files", got, "a/claimed", "a/running", "b/claimed", "b/succeeded", "d/claimed", "c/claimed")
	if files, _ := filepath.Glob(filepath.Join(this.Dir(), "*.jsonl")); len(files) != 2 {
		t.Fatalf("day files %v, want two", files)
	}
}
