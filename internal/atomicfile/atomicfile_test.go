package atomicfile_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chronoscron/chronos/internal/atomicfile"
)

// TestReplaceIsAllOrNothing replaces a file many times while readers read
// it: every read sees one whole version, the mode is the one asked for, and
// no temporary file is left behind.
func TestReplaceIsAllOrNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "active")
	versions := [][]byte{bytes.Repeat([]byte("a"), 64<<10), bytes.Repeat([]byte("b"), 96<<10)}
	if err := atomicfile.Replace(path, versions[0], 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("read: %v", err)
					return
				}
				if !bytes.Equal(b, versions[0]) && !bytes.Equal(b, versions[1]) {
					t.Errorf("read %d bytes that are no whole version", len(b))
					return
				}
			}
		})
	}
	var writers sync.WaitGroup
	for i := range 8 {
		writers.Go(func() {
			for j := range 20 {
				if err := atomicfile.Replace(path, versions[(i+j)%2], 0o600); err != nil {
					t.Errorf("replace: %v", err)
					return
				}
			}
		})
	}
	writers.Wait()
	close(done)
	readers.Wait()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", info.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("entries %v, want only the file", entries)
	}
}

// TestReplaceFailureKeepsTheOldFile: a write that cannot finish leaves the
// previous content in place.
func TestReplaceFailureKeepsTheOldFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := atomicfile.Replace(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The target is now a non-empty directory: the rename must fail.
	other := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(other, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Replace(other, []byte("new"), 0o600); err == nil {
		t.Fatal("replacing a directory succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("content %q, want old", b)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o644 {
		t.Errorf("mode %04o, want 0644", info.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("entries %v: a temporary file was left", entries)
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "k.pem")
	if err := atomicfile.Create(path, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Create(path, []byte("other"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: %v, want ErrExist", err)
	}
	b, _ := os.ReadFile(path)
	info, _ := os.Stat(path)
	if string(b) != "key" || info.Mode().Perm() != 0o600 {
		t.Fatalf("content %q mode %04o", b, info.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("entries %v: a temporary file was left", entries)
	}
}
