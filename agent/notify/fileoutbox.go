package notify

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/chronoscron/chronos/internal/filelock"
)

// Files of a FileOutbox in its directory.
const (
	OutboxFile = "outbox.jsonl"
	LockFile   = "outbox.lock"
)

// FileOptions configures a FileOutbox.
type FileOptions struct {
	// Now is the time source for leases and stamps (default time.Now).
	Now func() time.Time
	// LockTimeout bounds the wait for the directory's lock (default 5s).
	LockTimeout time.Duration
	// Retention is how long sent rows are kept when the log is compacted
	// (default 7 days); dead rows are kept until replayed.
	Retention time.Duration
	// CompactBytes is the log size above which a write compacts it
	// (default 1 MiB).
	CompactBytes int64
	// Log receives compaction failures (the change itself is already
	// durable; the next write tries again).
	Log *slog.Logger
}

// FileOutbox is a durable Outbox in a directory (the home's notify/),
// safe for any number of processes sharing it.
//
// The log, outbox.jsonl, holds one JSON line per state change: the whole
// Row after the change. The last line of an id is its state. Every
// operation takes an exclusive flock on outbox.lock (a shared one to read),
// folds the log, checks, and appends one line with one write and an fsync
// before returning. A torn last line (a crash mid-write) is ended before
// the next append and skipped by readers: its change was never
// acknowledged. When the log outgrows CompactBytes it is rewritten (a
// temporary file, fsynced, renamed over it, the directory fsynced) with
// one line per row still kept.
type FileOutbox struct {
	dir  string
	opts FileOptions
	// mu serialises this process's users: a flock is held per open file,
	// so goroutines sharing lock would not exclude each other.
	mu   sync.Mutex
	lock *os.File
}

// OpenFileOutbox opens (creating if needed) the outbox in dir.
func OpenFileOutbox(dir string, opts FileOptions) (*FileOutbox, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 5 * time.Second
	}
	if opts.Retention <= 0 {
		opts.Retention = 7 * 24 * time.Hour
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.CompactBytes <= 0 {
		opts.CompactBytes = 1 << 20
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("notify: create %s: %w", dir, err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("notify: open lock file: %w", err)
	}
	return &FileOutbox{dir: dir, opts: opts, lock: lf}, nil
}

// Close releases the lock file.
func (o *FileOutbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lock.Close()
}

// Path returns the log's path.
func (o *FileOutbox) Path() string { return filepath.Join(o.dir, OutboxFile) }

// Add makes notifications owed. A notification whose id is already in the
// outbox (in any state) is left alone, so adding the rows of a run again
// (after a crash, from the ledger) is harmless. It returns how many were new.
func (o *FileOutbox) Add(ctx context.Context, ns ...Notification) (int, error) {
	added := 0
	err := o.update(ctx, func(rows map[string]Row, now time.Time) ([]Row, error) {
		var out []Row
		for _, n := range ns {
			if _, ok := rows[n.ID]; ok || n.ID == "" {
				continue
			}
			if n.CreatedAt.IsZero() {
				n.CreatedAt = now
			}
			r := Row{Notification: n, State: StatePending, UpdatedAt: now}
			rows[n.ID] = r
			out = append(out, r)
		}
		added = len(out)
		return out, nil
	})
	return added, err
}

// Pending implements Outbox.
func (o *FileOutbox) Pending(ctx context.Context) ([]Row, error) {
	return o.List(ctx, StatePending, StateSending)
}

// List returns the rows in any of states (all rows if none), oldest first.
func (o *FileOutbox) List(ctx context.Context, states ...State) ([]Row, error) {
	var out []Row
	err := o.view(ctx, func(rows map[string]Row) {
		for _, r := range rows {
			if len(states) == 0 || slices.Contains(states, r.State) {
				out = append(out, r)
			}
		}
	})
	slices.SortFunc(out, func(a, b Row) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a.ID), []byte(b.ID))
	})
	return out, err
}

// Get returns one row.
func (o *FileOutbox) Get(ctx context.Context, id string) (Row, error) {
	var r Row
	var ok bool
	err := o.view(ctx, func(rows map[string]Row) { r, ok = rows[id] })
	if err == nil && !ok {
		err = fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return r, err
}

// Claim implements Outbox.
func (o *FileOutbox) Claim(ctx context.Context, id, owner string, lease time.Duration) (Row, error) {
	var claimed Row
	err := o.update(ctx, func(rows map[string]Row, now time.Time) ([]Row, error) {
		r, ok := rows[id]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		case r.State == StateSent || r.State == StateDead:
			return nil, fmt.Errorf("%w: %s is %s", ErrFinished, id, r.State)
		case r.State == StateSending && now.Before(r.LeaseUntil):
			return nil, fmt.Errorf("%w: %s held by %s until %s", ErrClaimed, id, r.Owner, r.LeaseUntil.Format(time.RFC3339))
		case r.State == StatePending && now.Before(r.NextAt):
			return nil, fmt.Errorf("%w: %s at %s", ErrNotDue, id, r.NextAt.Format(time.RFC3339))
		}
		r.State, r.Owner, r.LeaseUntil, r.UpdatedAt = StateSending, owner, now.Add(lease), now
		r.Token++
		claimed = r
		return []Row{r}, nil
	})
	return claimed, err
}

// Done implements Outbox.
func (o *FileOutbox) Done(ctx context.Context, claim Row, a Attempt) error {
	return o.update(ctx, func(rows map[string]Row, now time.Time) ([]Row, error) {
		r, ok := rows[claim.ID]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, claim.ID)
		}
		if r.State != StateSending || r.Token != claim.Token || r.Owner != claim.Owner {
			return nil, fmt.Errorf("%w: %s (token %d, now %s token %d)", ErrStaleClaim, claim.ID, claim.Token, r.State, r.Token)
		}
		if a.At.IsZero() {
			a.At = now
		}
		r.Attempts++
		r.State, r.NextAt, r.UpdatedAt = a.State, a.NextAt, a.At
		r.Owner, r.LeaseUntil = "", time.Time{}
		if a.State == StateSent {
			r.LastStatus, r.LastError = a.Status, ""
		} else {
			r.LastStatus, r.LastError = a.Status, a.Error
		}
		if a.State == StateSent || a.State == StateDead {
			r.FinishedAt = a.At
		}
		return []Row{r}, nil
	})
}

// Replay makes a sent or dead notification owed again under the same id
// (receivers de-duplicate on it); its give-up time starts again now. A
// pending row is returned unchanged; a sending one fails with ErrClaimed.
func (o *FileOutbox) Replay(ctx context.Context, id string) (Row, error) {
	var out Row
	err := o.update(ctx, func(rows map[string]Row, now time.Time) ([]Row, error) {
		r, ok := rows[id]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		case r.State == StatePending:
			out = r
			return nil, nil
		case r.State == StateSending && now.Before(r.LeaseUntil):
			return nil, fmt.Errorf("%w: %s held by %s", ErrClaimed, id, r.Owner)
		}
		r.State, r.NextAt, r.Since, r.UpdatedAt = StatePending, time.Time{}, now, now
		r.Attempts, r.FinishedAt, r.Owner, r.LeaseUntil = 0, time.Time{}, "", time.Time{}
		out = r
		return []Row{r}, nil
	})
	return out, err
}

// view runs fn on the folded rows under the shared lock.
func (o *FileOutbox) view(ctx context.Context, fn func(map[string]Row)) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.acquire(ctx, filelock.Shared); err != nil {
		return err
	}
	defer o.release()
	rows, _, err := o.read()
	if err != nil {
		return err
	}
	fn(rows)
	return nil
}

// update folds the log under the exclusive lock, lets fn change rows, and
// appends the rows fn returns (one fsynced write). An error from fn
// changes nothing.
func (o *FileOutbox) update(ctx context.Context, fn func(rows map[string]Row, now time.Time) ([]Row, error)) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.acquire(ctx, filelock.Exclusive); err != nil {
		return err
	}
	defer o.release()
	rows, lines, err := o.read()
	if err != nil {
		return err
	}
	changed, err := fn(rows, o.opts.Now())
	if err != nil || len(changed) == 0 {
		return err
	}
	var buf bytes.Buffer
	for _, r := range changed {
		rows[r.ID] = r // compaction below writes what the log now says
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("notify: encode %s: %w", r.ID, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if err := appendLine(o.Path(), buf.Bytes()); err != nil {
		return fmt.Errorf("notify: outbox: %w", err)
	}
	if err := o.maybeCompact(rows, lines+len(changed)); err != nil {
		o.opts.Log.Warn("notify: outbox compaction failed", "err", err)
	}
	return nil
}

// read folds the log: the last whole line of each id wins. It returns the
// rows and the number of lines read.
func (o *FileOutbox) read() (map[string]Row, int, error) {
	rows := map[string]Row{}
	f, err := os.Open(o.Path())
	if errors.Is(err, os.ErrNotExist) {
		return rows, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("notify: open outbox: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	lines := 0
	for sc.Scan() {
		lines++
		var r Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.ID == "" {
			continue // a torn line: its change was never acknowledged
		}
		rows[r.ID] = r
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("notify: read outbox: %w", err)
	}
	return rows, lines, nil
}
