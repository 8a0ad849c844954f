package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder keeps the lines an observer was told of, as "run/state".
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) see(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, e.RunID+"/"+string(e.State))
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// followed opens the ledger in a new directory with an ObserveAll
// recorder, and a second Ledger on the same directory, as another process
// has it.
func followed(t *testing.T) (this, other *Ledger, rec *recorder) {
	t.Helper()
	dir := t.TempDir()
	this, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return this, other, &recorder{}
}

func mustAppend(t *testing.T, l *Ledger, es ...Entry) {
	t.Helper()
	for _, e := range es {
		if err := l.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

func mustFollow(t *testing.T, l *Ledger) {
	t.Helper()
	if err := l.Follow(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func wantLines(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: told %q, want %q", what, got, want)
	}
}

// TestFollowTellsOthersLinesOnce: ObserveAll's observers are told of this
// Ledger's lines as they are appended and of another Ledger's lines when
// Follow finds them: each once, none from before ObserveAll; Observe's
// observers still hear only this Ledger's lines.
func TestFollowTellsOthersLinesOnce(t *testing.T) {
	t.Parallel()
	this, other, rec := followed(t)
	mustAppend(t, other, entry("before", StateClaimed, day, 1))
	mine := &recorder{}
	this.Observe(mine.see)
	this.ObserveAll(rec.see)
	mustAppend(t, this, entry("a", StateClaimed, day, 1))
	mustAppend(t, other, entry("b", StateClaimed, day, 2))
	mustAppend(t, this, entry("a", StateSucceeded, day, 1))
	mustAppend(t, other, entry("b", StateFailed, day, 2))
	wantLines(t, "before Follow", rec.got(), "a/claimed", "a/succeeded")
	mustFollow(t, this)
	all := []string{"a/claimed", "a/succeeded", "b/claimed", "b/failed"}
	wantLines(t, "after Follow", rec.got(), all...)
	mustFollow(t, this)
	wantLines(t, "after a second Follow", rec.got(), all...)
	wantLines(t, "Observe", mine.got(), "a/claimed", "a/succeeded")
}

// TestFollowWaitsForAWholeLine: a line another process has written only
// in part is told once its newline is there, and once; a line torn by a
// crash and ended by a later append is skipped, and this Ledger's line
// that ended it is not told twice.
func TestFollowWaitsForAWholeLine(t *testing.T) {
	t.Parallel()
	this, other, rec := followed(t)
	this.ObserveAll(rec.see)
	path := filepath.Join(this.Dir(), "2026-06-01.jsonl")
	b, err := json.Marshal(entry("b", StateRunning, day, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	mustFollow(t, this)
	wantLines(t, "half a line", rec.got())
	tearWith(t, path, string(b[len(b)/2:]))
	mustFollow(t, this)
	wantLines(t, "the whole line without its newline", rec.got())
	tearWith(t, path, "\n")
	mustFollow(t, this)
	mustFollow(t, this)
	wantLines(t, "the ended line", rec.got(), "b/running")

	tear(t, path)
	mustFollow(t, this)
	mustAppend(t, this, entry("c", StateClaimed, day, 2))
	mustFollow(t, this)
	mustAppend(t, other, entry("d", StateClaimed, day, 3))
	mustFollow(t, this)
	wantLines(t, "after a torn line", rec.got(), "b/running", "c/claimed", "d/claimed")
}

// TestFollowNewDaysAndRetention: a new day file is read from its start,
// an older one still written to is read on, day files in order; a day file
// removed by retention is forgotten, and one made again under its name is
// read from its start.
func TestFollowNewDaysAndRetention(t *testing.T) {
	t.Parallel()
	this, other, rec := followed(t)
	mustAppend(t, other, entry("old", StateClaimed, day, 1))
	this.ObserveAll(rec.see)
	mustAppend(t, other, entry("x", StateClaimed, day, 1))
	mustFollow(t, this)
	next := day.Add(24 * time.Hour)
	mustAppend(t, other, entry("y", StateClaimed, next, 2), entry("x", StateSucceeded, day.Add(time.Minute), 1))
	mustFollow(t, this)
	wantLines(t, "two days", rec.got(), "x/claimed", "x/succeeded", "y/claimed")

	if n, err := this.Prune(context.Background(), next, time.Hour, ""); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	mustFollow(t, this)
	mustAppend(t, other, entry("z", StateClaimed, day, 3))
	mustFollow(t, this)
	mustAppend(t, this, entry("w", StateClaimed, day, 4))
	mustFollow(t, this)
	wantLines(t, "after retention", rec.got(), "x/claimed", "x/succeeded", "y/claimed", "z/claimed", "w/claimed")
}

// TestFollowWhileAppending: this Ledger's appends made at once, another's
// and Follow running meanwhile: every line is told exactly once, and the
// other's in the order it wrote them.
func TestFollowWhileAppending(t *testing.T) {
	t.Parallel()
	this, other, rec := followed(t)
	this.ObserveAll(rec.see)
	ctx, cancel := context.WithCancel(context.Background())
	followDone := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := this.Follow(ctx); err != nil && ctx.Err() == nil {
				followDone <- err
				return
			}
		}
		followDone <- nil
	}()
	const each = 25
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range each {
				if err := this.Append(ctx, entry(fmt.Sprintf("a%d-%02d", g, i), StateClaimed, day, 1)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 4 * each {
			if err := other.Append(ctx, entry(fmt.Sprintf("b%03d", i), StateClaimed, day, 2)); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	cancel()
	if err := <-followDone; err != nil {
		t.Fatal(err)
	}
	mustFollow(t, this)
	got := rec.got()
	seen := map[string]int{}
	var others []string
	for _, l := range got {
		seen[l]++
		if l[0] == 'b' {
			others = append(others, l)
		}
	}
	if len(got) != 8*each || len(seen) != 8*each {
		t.Fatalf("told %d lines, %d distinct, want %d each once", len(got), len(seen), 8*each)
	}
	if !slices.IsSorted(others) {
		t.Fatalf("the other's lines out of order: %q", others)
	}
}
