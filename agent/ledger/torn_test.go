package ledger

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAppendAfterTornLine pins that a line torn by a crash mid-write does not
// swallow the next append: the ledger stays readable and keeps every whole
// line, before and after the tear.
func TestAppendAfterTornLine(t *testing.T) {
	t.Parallel()
	for name, torn := range map[string]string{
		"cut in a value":       `{"time":"2026-06-01T09:00:01Z","run_id":"b","job_id":"j","sta`,
		"cut in the first key": `{"ti`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := l.Append(ctx, entry("a", StateClaimed, day, 1)); err != nil {
				t.Fatal(err)
			}
			tearWith(t, filepath.Join(l.Dir(), "2026-06-01.jsonl"), torn)
			for i, s := range []State{StateRunning, StateSucceeded} {
				if err := l.Append(ctx, entry("a", s, day.Add(time.Duration(i+1)*time.Second), 1)); err != nil {
					t.Fatal(err)
				}
			}
			runs, err := l.Runs(ctx, Filter{})
			if err != nil {
				t.Fatalf("runs after a torn line: %v", err)
			}
			if len(runs) != 1 || runs[0].State != StateSucceeded || len(runs[0].States) != 3 {
				t.Fatalf("runs %+v, want run a claimed, running, succeeded", runs)
			}
		})
	}
}

// TestReadGluedTornLine reads a day file written before appends isolated a
// torn line: the tear and the next whole line share one line. The whole
// line is recovered and the ledger stays readable.
func TestReadGluedTornLine(t *testing.T) {
	t.Parallel()
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	path := filepath.Join(l.Dir(), "2026-06-01.jsonl")
	if err := l.Append(ctx, entry("a", StateClaimed, day, 1)); err != nil {
		t.Fatal(err)
	}
	tear(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	whole := `{"time":"2026-06-01T09:00:02Z","run_id":"a","job_id":"j","state":"succeeded","slot":"2026-06-01T09:00:00Z","trigger":"scheduled","attempt":1,"lateness_ms":0,"token":1}` + "\n"
	if err := os.WriteFile(path, append(b, whole...), 0o600); err != nil {
		t.Fatal(err)
	}
	es, err := l.Entries(ctx, Filter{})
	if err != nil {
		t.Fatalf("entries: %v", err)
	}
	if len(es) != 2 || es[1].State != StateSucceeded {
		t.Fatalf("entries %+v, want claimed and succeeded", es)
	}

	// Garbage that is not a tear is still an error.
	if err := os.WriteFile(path, []byte("not json at all\n"+whole), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Entries(ctx, Filter{}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("garbage line: err %v, want an error naming line 1", err)
	}
}

// tear appends the first part of a ledger line without its newline, as a
// crash in the middle of a write can leave it.
func tear(t *testing.T, path string) {
	t.Helper()
	tearWith(t, path, `{"time":"2026-06-01T09:00:01Z","run_id":"b","job_id":"j","sta`)
}

func tearWith(t *testing.T, path, torn string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(torn); err != nil {
		t.Fatal(err)
	}
}
