//go:build unix

// Package filelock serialises processes sharing a directory with flock(2)
// on a lock file: shared for readers, exclusive for writers. Acquire polls a
// non-blocking flock, so a wait ends with its context or its timeout instead
// of blocking a thread in the kernel; the poll starts at 200 µs and backs
// off to 5 ms, so a lock freed by another process is taken within a few
// milliseconds.
//
// The job store, the provider's reconcile lock and the notification outbox
// lock through it. It is ours rather than a library's because callers need
// both a context and a timeout on one wait, with the timeout told apart from
// the context's end; a flock is a few lines over the system call.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/internal/backoff"
)

// Mode is how a lock is held.
type Mode int

const (
	// Shared lets other shared holders in and keeps exclusive ones out.
	Shared Mode = iota
	// Exclusive keeps every other holder out.
	Exclusive
)

// ErrTimeout is returned when the lock was still held by another process
// when the timeout passed.
var ErrTimeout = errors.New("lock still held")

// poll spaces the tries of a wait.
var poll = backoff.Policy{Base: 200 * time.Microsecond, Max: 5 * time.Millisecond}

// Acquire takes the lock of f in mode m, trying until it succeeds, ctx ends
// (ctx's error, wrapped) or timeout passes (ErrTimeout; a timeout of zero or
// less waits for ctx alone). A process holds one lock per open file: two
// goroutines sharing f must exclude each other themselves.
func Acquire(ctx context.Context, f *os.File, m Mode, timeout time.Duration) error {
	how := syscall.LOCK_SH
	if m == Exclusive {
		how = syscall.LOCK_EX
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	fd := int(f.Fd())
	for try := 1; ; try++ {
		err := syscall.Flock(fd, how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("flock %s: %w", f.Name(), err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for the lock %s: %w", f.Name(), err)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("%s: %w after %s", f.Name(), ErrTimeout, timeout)
		}
		if err := backoff.Sleep(ctx, poll.Delay(try)); err != nil {
			return fmt.Errorf("waiting for the lock %s: %w", f.Name(), err)
		}
	}
}

// Release lets go of the lock of f.
func Release(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// LockPath takes an exclusive lock on the file at path (created 0600 when
// missing), waiting until ctx ends, and returns the function that releases
// it and closes the file.
func LockPath(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := Acquire(ctx, f, Exclusive, 0); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		Release(f)
		_ = f.Close()
	}, nil
}
