package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestKeysActivateConcurrently runs several `chronos keys activate` at once
// on one dir: each replaces the active file whole (its own temporary file,
// renamed into place), so every one succeeds, the file names one of the
// kids, keeps mode 0600, and no temporary file is left.
func TestKeysActivateConcurrently(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	var kids []string
	for range 4 {
		code, out, errOut := nasRunCLI(t, "keys", "generate", "--out", dir)
		if code != 0 {
			t.Fatal(errOut)
		}
		kids = append(kids, strings.TrimSpace(out))
	}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), []string{"keys", "activate", "--dir", dir, kids[i%len(kids)]}, &stdout, &stderr); code != exitOK {
				t.Errorf("activate: exit %d: %s", code, stderr.String())
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(filepath.Join(dir, "active"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range kids {
		found = found || string(b) == k+"\n"
	}
	if !found {
		t.Fatalf("active file %q names none of %v", b, kids)
	}
	if info, _ := os.Stat(filepath.Join(dir, "active")); info.Mode().Perm() != 0o600 {
		t.Errorf("active file mode %04o, want 0600", info.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(kids)+1 {
		t.Errorf("dir holds %d entries, want %d keys and the active file", len(entries), len(kids))
	}
}
