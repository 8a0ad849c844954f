package ledger

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Observers see every line that was written, in order, and no line whose
// append failed.
func TestObserversSeeDurableLines(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "runs")
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var a, b []State
	l.Observe(func(e Entry) { a = append(a, e.State) })
	l.Observe(func(e Entry) { b = append(b, e.State) })
	ctx := context.Background()
	for _, e := range []Entry{entry("r", StateClaimed, day, 1), entry("r", StateSucceeded, day.Add(time.Second), 1)} {
		if err := l.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// A line that cannot be written is not observed.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, entry("r2", StateFailed, day, 2)); err == nil {
		t.Fatal("append into a file succeeded")
	}
	if err := l.Append(ctx, Entry{}); err == nil {
		t.Fatal("an empty entry was appended")
	}
	want := []State{StateClaimed, StateSucceeded}
	for _, got := range [][]State{a, b} {
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("observed %v, want %v", got, want)
		}
	}
}
