package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// acquire takes the flock (exclusive or shared), polling with a short
// backoff until ctx or the lock timeout ends.
func (o *FileOutbox) acquire(ctx context.Context, how int) error {
	deadline := time.Now().Add(o.opts.LockTimeout)
	fd := int(o.lock.Fd())
	wait := 200 * time.Microsecond
	for {
		err := syscall.Flock(fd, how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("notify: flock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("notify: outbox lock still held after %s", o.opts.LockTimeout)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("notify: waiting for the outbox lock: %w", ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, 5*time.Millisecond)
	}
}

func (o *FileOutbox) release() { _ = syscall.Flock(int(o.lock.Fd()), syscall.LOCK_UN) }

// maybeCompact rewrites the log with one line per kept row once it has
// grown past CompactBytes and at least half its lines would go (superseded
// lines, and sent rows older than Retention). Open and dead rows are kept.
// The caller holds the exclusive lock.
func (o *FileOutbox) maybeCompact(rows map[string]Row, lines int) error {
	st, err := os.Stat(o.Path())
	if err != nil || st.Size() < o.opts.CompactBytes {
		return nil
	}
	cutoff := o.opts.Now().Add(-o.opts.Retention)
	kept := make([]Row, 0, len(rows))
	for _, r := range rows {
		if r.State == StateSent && r.FinishedAt.Before(cutoff) {
			continue
		}
		kept = append(kept, r)
	}
	if 2*len(kept) > lines {
		return nil
	}
	slices.SortFunc(kept, func(a, b Row) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	return o.rewrite(kept)
}

// rewrite replaces the log atomically with rows.
func (o *FileOutbox) rewrite(rows []Row) error {
	tmp, err := os.CreateTemp(o.dir, ".outbox-*")
	if err != nil {
		return fmt.Errorf("notify: compact: %w", err)
	}
	defer os.Remove(tmp.Name())
	enc := json.NewEncoder(tmp)
	for _, r := range rows {
		if err = enc.Encode(r); err != nil {
			break
		}
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(o.dir, OutboxFile))
	}
	if err != nil {
		return fmt.Errorf("notify: compact: %w", err)
	}
	return syncDir(o.dir)
}
