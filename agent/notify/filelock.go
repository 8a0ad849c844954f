package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/chronoscron/chronos/internal/atomicfile"
	"github.com/chronoscron/chronos/internal/filelock"
)

// acquire takes the directory's lock file (filelock.Shared or Exclusive)
// until ctx or the lock timeout ends.
func (o *FileOutbox) acquire(ctx context.Context, m filelock.Mode) error {
	if err := filelock.Acquire(ctx, o.lock, m, o.opts.LockTimeout); err != nil {
		return fmt.Errorf("notify: outbox: %w", err)
	}
	return nil
}

func (o *FileOutbox) release() { filelock.Release(o.lock) }

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
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("notify: compact: %w", err)
		}
	}
	if err := atomicfile.Replace(filepath.Join(o.dir, OutboxFile), buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("notify: compact: %w", err)
	}
	return nil
}
