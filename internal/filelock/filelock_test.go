//go:build unix

package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func openLock(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Two open files of one path stand for two processes: flock locks belong
// to the open file.
func TestSharedAndExclusive(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	a, b, c := openLock(t, path), openLock(t, path), openLock(t, path)
	ctx := context.Background()
	if err := Acquire(ctx, a, Shared, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := Acquire(ctx, b, Shared, time.Second); err != nil {
		t.Fatalf("a second reader was kept out: %v", err)
	}
	if err := Acquire(ctx, c, Exclusive, 20*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a writer got in beside readers: %v", err)
	}
	Release(a)
	Release(b)
	if err := Acquire(ctx, c, Exclusive, time.Second); err != nil {
		t.Fatalf("writer after the readers left: %v", err)
	}
	if err := Acquire(ctx, a, Shared, 20*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a reader got in beside a writer: %v", err)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	a, b := openLock(t, path), openLock(t, path)
	if err := Acquire(context.Background(), a, Exclusive, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Acquire(ctx, b, Exclusive, 0) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("wait ended with %v, want the context's cancellation", err)
	}
}

func TestWaiterGetsTheLockOnceFreed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	a, b := openLock(t, path), openLock(t, path)
	if err := Acquire(context.Background(), a, Exclusive, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Acquire(context.Background(), b, Exclusive, 10*time.Second) }()
	Release(a)
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// TestLockPath: LockPath creates the lock file private and holds it
// exclusively until unlocked.
func TestLockPath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := LockPath(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file %v, %v; want mode 0600", fi, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := LockPath(ctx, path); err == nil {
		t.Fatal("a second lock was taken while the first was held")
	}
	unlock()
	again, err := LockPath(context.Background(), path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again()
}
