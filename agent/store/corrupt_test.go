package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCorruptCopiesAreKept pins that every distinct corrupt content is kept
// aside in its own file, even when two are found within the same second, and
// that finding the same corrupt file again does not make another copy.
func TestCorruptCopiesAreKept(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	at := time.Date(2026, 6, 18, 9, 0, 0, 0, time.UTC)
	s, err := Open(home, Options{Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	path := filepath.Join(home, JobsFile)
	contents := []string{`{"version":1,"jobs":[{`, `[]`, `{"version":1,"jobs":[{`, ``, `[]`}
	for i, c := range contents {
		if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.List(context.Background())
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read %d: %v, want ErrCorrupt", i, err)
		}
		copies, _ := filepath.Glob(path + ".corrupt-*")
		var named string
		for _, cp := range copies {
			if strings.Contains(err.Error(), cp) {
				named = cp
			}
		}
		if named == "" {
			t.Fatalf("read %d: error %q names none of %v", i, err, copies)
		}
		if b, _ := os.ReadFile(named); string(b) != c {
			t.Fatalf("read %d: the copy the error names holds %q, want %q", i, b, c)
		}
		if b, _ := os.ReadFile(path); string(b) != c {
			t.Fatalf("read %d: jobs.json was changed to %q", i, b)
		}
	}
	copies, _ := filepath.Glob(path + ".corrupt-*")
	if len(copies) != 3 {
		t.Fatalf("copies %v, want one per distinct content (3)", copies)
	}
}
