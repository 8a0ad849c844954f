// Package held writes ledger lines that may not be writable at once (a
// full disk, a read-only home): a line that cannot be appended is held in
// memory, with every later one behind it so a run's lines stay in order,
// and written again with backoff until it is durable.
package held

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/internal/backoff"
)

// Backoff spaces the writes of a held result: 100 ms doubling to 5 s.
var Backoff = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}

// closeFlush bounds how long FlushBeforeClose keeps trying held lines
// after its context allows.
const closeFlush = 10 * time.Second

// Lines holds ledger lines that could not be appended, in order; every
// later line waits behind them.
type Lines struct {
	ledger  *ledger.Ledger
	log     *slog.Logger
	written func() // called when held lines were written

	mu    sync.Mutex // serialises appends
	lines []ledger.Entry

	backlog atomic.Int64
	err     atomic.Pointer[error] // why the oldest held line failed
	kick    chan struct{}
}

// New returns the writer of lg's lines; written is called after held lines
// were written.
func New(lg *ledger.Ledger, log *slog.Logger, written func()) *Lines {
	return &Lines{ledger: lg, log: log, written: written, kick: make(chan struct{}, 1)}
}

// Failure is why the oldest held line could not be written.
func (j *Lines) Failure() error {
	if p := j.err.Load(); p != nil {
		return *p
	}
	return errors.New("ledger not writable")
}

// Backlog is how many lines are held.
func (j *Lines) Backlog() int64 { return j.backlog.Load() }

// Record appends es to the ledger, in one write and one sync, or holds
// them (and every later line) until they can be appended. It never fails:
// held lines are written by Loop.
func (j *Lines) Record(es ...ledger.Entry) {
	if len(es) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.lines) == 0 {
		err := j.ledger.Append(context.Background(), es...)
		if err == nil {
			return
		}
		j.err.Store(&err)
		j.log.Error("ledger lines not written; holding them and trying again", "job_id", es[0].JobID, "run_id", es[0].RunID, "state", es[0].State, "lines", len(es), "error", err)
	}
	j.lines = append(j.lines, es...)
	j.backlog.Store(int64(len(j.lines)))
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// flush appends held lines in order until one fails; it reports whether
// none is left.
func (j *Lines) flush() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := len(j.lines)
	for len(j.lines) > 0 {
		if err := j.ledger.Append(context.Background(), j.lines[0]); err != nil {
			j.err.Store(&err)
			return false
		}
		j.lines = j.lines[1:]
		j.backlog.Store(int64(len(j.lines)))
	}
	if n > 0 {
		j.lines = nil
		j.err.Store(nil)
		j.log.Info("held ledger lines written", "lines", n)
		j.written()
	}
	return true
}

// HasRun reports whether a held ledger line belongs to run runID.
func (j *Lines) HasRun(runID string) bool {
	if j.backlog.Load() == 0 {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.lines {
		if e.RunID == runID {
			return true
		}
	}
	return false
}

// HasSlot reports whether a held ledger line is about slot of jobID.
func (j *Lines) HasSlot(jobID string, slot time.Time) bool {
	if j.backlog.Load() == 0 {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.lines {
		if e.JobID == jobID && e.Slot.Equal(slot) {
			return true
		}
	}
	return false
}

// Loop writes held lines with backoff until ctx ends.
func (j *Lines) Loop(ctx context.Context) {
	failures := 0
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-j.kick:
		case <-retry:
		}
		if j.flush() {
			failures, retry = 0, nil
			continue
		}
		failures++
		retry = time.After(Backoff.Delay(failures))
	}
}

// FlushBeforeClose tries held lines until ctx ends (at least once, at
// most closeFlush) and returns how many are left, logging them lost.
func (j *Lines) FlushBeforeClose(ctx context.Context) int {
	limit := time.NewTimer(closeFlush)
	defer limit.Stop()
	failures := 0
	for !j.flush() {
		failures++
		t := time.NewTimer(Backoff.Delay(failures))
		select {
		case <-ctx.Done():
		case <-limit.C:
		case <-t.C:
			continue
		}
		t.Stop()
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, e := range j.lines {
			j.log.Error("ledger line lost at shutdown: the ledger is not writable", "job_id", e.JobID, "run_id", e.RunID, "state", e.State, "error", j.Failure())
		}
		return len(j.lines)
	}
	return 0
}
