package notify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestFileOutboxAddIsIdempotent(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	box, err := OpenFileOutbox(t.TempDir(), FileOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	a := sample("ntf_a", Target{Kind: KindFile, Path: "/a"})
	b := sample("ntf_b", Target{Kind: KindFile, Path: "/b"})
	if n, err := box.Add(ctx, a, b); err != nil || n != 2 {
		t.Fatalf("first add: %d %v", n, err)
	}
	c, _ := box.Claim(ctx, "ntf_a", "me", time.Minute)
	if err := box.Done(ctx, c, Attempt{State: StateSent}); err != nil {
		t.Fatal(err)
	}
	if n, err := box.Add(ctx, a, b); err != nil || n != 0 {
		t.Fatalf("second add: %d %v", n, err)
	}
	if row, _ := box.Get(ctx, "ntf_a"); row.State != StateSent {
		t.Fatalf("adding again reopened a sent row: %+v", row)
	}
	if _, err := box.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
}

func TestFileOutboxClaimRules(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	box, err := OpenFileOutbox(t.TempDir(), FileOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	if _, err := box.Add(ctx, sample("ntf_x", Target{Kind: KindFile, Path: "/x"})); err != nil {
		t.Fatal(err)
	}
	if _, err := box.Claim(ctx, "missing", "a", time.Minute); !errors.Is(err, ErrNotFound) {
		t.Fatalf("claim missing: %v", err)
	}
	first, err := box.Claim(ctx, "ntf_x", "a", time.Minute)
	if err != nil || first.Token != 1 || first.State != StateSending || !first.LeaseUntil.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("claim %+v %v", first, err)
	}
	if _, err := box.Claim(ctx, "ntf_x", "b", time.Minute); !errors.Is(err, ErrClaimed) {
		t.Fatalf("second claim under a live lease: %v", err)
	}
	if _, err := box.Replay(ctx, "ntf_x"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("replay of a sending row: %v", err)
	}
	if err := box.Done(ctx, Row{Notification: first.Notification, Owner: "a", Token: 7}, Attempt{State: StateSent}); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("done with a wrong token: %v", err)
	}
	next := clock.Now().Add(time.Hour)
	if err := box.Done(ctx, first, Attempt{State: StatePending, NextAt: next, Status: 503, Error: "busy"}); err != nil {
		t.Fatal(err)
	}
	if _, err := box.Claim(ctx, "ntf_x", "b", time.Minute); !errors.Is(err, ErrNotDue) {
		t.Fatalf("claim before next_at: %v", err)
	}
	clock.Set(next)
	second, err := box.Claim(ctx, "ntf_x", "b", time.Minute)
	if err != nil || second.Token != 2 || second.Attempts != 1 || second.LastError != "busy" {
		t.Fatalf("claim when due: %+v %v", second, err)
	}
	if err := box.Done(ctx, second, Attempt{State: StateDead, Status: 410, Error: "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := box.Claim(ctx, "ntf_x", "c", time.Minute); !errors.Is(err, ErrFinished) {
		t.Fatalf("claim of a dead row: %v", err)
	}
	if open, _ := box.Pending(ctx); len(open) != 0 {
		t.Fatalf("pending %v", open)
	}
}

// A crash mid-append leaves a torn last line: it is skipped, and the next
// append still writes a whole line.
func TestFileOutboxTornLine(t *testing.T) {
	t.Parallel()
	box, err := OpenFileOutbox(t.TempDir(), FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	if _, err := box.Add(ctx, sample("ntf_1", Target{Kind: KindFile, Path: "/x"})); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(box.Path(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":"ntf_1","state":"se`)
	f.Close()
	if _, err := box.Add(ctx, sample("ntf_2", Target{Kind: KindFile, Path: "/x"})); err != nil {
		t.Fatal(err)
	}
	rows, err := box.List(ctx)
	if err != nil || len(rows) != 2 || rows[0].State != StatePending || rows[1].State != StatePending {
		t.Fatalf("rows %+v %v", rows, err)
	}
}

// Once the log outgrows its bound it is rewritten with one line per kept
// row: old sent rows go, open and dead ones stay.
func TestFileOutboxCompacts(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	box, err := OpenFileOutbox(t.TempDir(), FileOptions{Now: clock.Now, CompactBytes: 16 << 10, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	finish := func(id string, s State) {
		c, err := box.Claim(ctx, id, "me", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := box.Done(ctx, c, Attempt{State: s}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		id := fmt.Sprintf("ntf_old%d", i)
		box.Add(ctx, sample(id, Target{Kind: KindFile, Path: "/x"}))
		finish(id, StateSent)
	}
	box.Add(ctx, sample("ntf_dead", Target{Kind: KindFile, Path: "/x"}))
	finish("ntf_dead", StateDead)
	clock.Advance(2 * time.Hour)
	for i := range 10 {
		id := fmt.Sprintf("ntf_new%d", i)
		box.Add(ctx, sample(id, Target{Kind: KindFile, Path: "/x"}))
		if i%2 == 0 {
			finish(id, StateSent)
		}
	}
	rows, err := box.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var old, dead, fresh int
	for _, r := range rows {
		switch {
		case strings.HasPrefix(r.ID, "ntf_old"):
			old++
		case r.ID == "ntf_dead":
			dead++
		default:
			fresh++
			var i int
			fmt.Sscanf(r.ID, "ntf_new%d", &i)
			if want := map[bool]State{true: StateSent, false: StatePending}[i%2 == 0]; r.State != want {
				t.Errorf("%s is %s after compaction, want %s", r.ID, r.State, want)
			}
		}
	}
	if old != 0 || dead != 1 || fresh != 10 {
		t.Fatalf("after compaction: %d old sent, %d dead, %d new rows", old, dead, fresh)
	}
	st, _ := os.Stat(box.Path())
	if st.Size() > 32<<10 {
		t.Fatalf("log is %d bytes: not compacted", st.Size())
	}
}
