package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/internal/atomicfile"
	"github.com/chronoscron/chronos/internal/backoff"
)

// Results that cannot be written at once (a full disk, a read-only home)
// are held in memory and written again, with backoff, until they are
// durable: a run's completion in jobs.json (see finish) and ledger lines
// (the journal). Meanwhile the runtime reports the store unwritable.

// heldBackoff spaces the writes of a held result: 100 ms doubling to 5 s.
var heldBackoff = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}

const (
	// probeEvery bounds how often StoreWritable probes the home.
	probeEvery = 2 * time.Second
	// closeFlush bounds how long Close keeps trying held ledger lines
	// after its context allows.
	closeFlush = 10 * time.Second
)

// journal holds ledger lines that could not be appended, in order; every
// later line waits behind them, so a run's lines stay in order.
type journal struct {
	mu    sync.Mutex // serialises appends
	lines []ledger.Entry

	backlog atomic.Int64
	err     atomic.Pointer[error] // why the oldest held line failed
	kick    chan struct{}
}

func (j *journal) failure() error {
	if p := j.err.Load(); p != nil {
		return *p
	}
	return errors.New("ledger not writable")
}

// record appends es to the ledger, in one write and one sync, or holds
// them (and every later line) until they can be appended. It never fails:
// held lines are written by flushLoop.
func (rt *Runtime) record(es ...ledger.Entry) {
	if len(es) == 0 {
		return
	}
	j := &rt.journal
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.lines) == 0 {
		err := rt.ledger.Append(context.Background(), es...)
		if err == nil {
			return
		}
		j.err.Store(&err)
		rt.log.Error("ledger lines not written; holding them and trying again", "job_id", es[0].JobID, "run_id", es[0].RunID, "state", es[0].State, "lines", len(es), "error", err)
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
func (rt *Runtime) flush() bool {
	j := &rt.journal
	j.mu.Lock()
	defer j.mu.Unlock()
	n := len(j.lines)
	for len(j.lines) > 0 {
		if err := rt.ledger.Append(context.Background(), j.lines[0]); err != nil {
			j.err.Store(&err)
			return false
		}
		j.lines = j.lines[1:]
		j.backlog.Store(int64(len(j.lines)))
	}
	if n > 0 {
		j.lines = nil
		j.err.Store(nil)
		rt.log.Info("held ledger lines written", "lines", n)
		rt.signal()
	}
	return true
}

// heldLine reports whether a held ledger line belongs to run runID.
func (rt *Runtime) heldLine(runID string) bool {
	j := &rt.journal
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

// heldSlot reports whether a held ledger line is about slot of jobID.
func (rt *Runtime) heldSlot(jobID string, slot time.Time) bool {
	j := &rt.journal
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

// flushLoop writes held ledger lines with backoff until ctx ends.
func (rt *Runtime) flushLoop(ctx context.Context) {
	defer rt.watchWG.Done()
	failures := 0
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-rt.journal.kick:
		case <-retry:
		}
		if rt.flush() {
			failures, retry = 0, nil
			continue
		}
		failures++
		retry = time.After(heldBackoff.Delay(failures))
	}
}

// flushBeforeClose tries held ledger lines until ctx ends (at least once,
// at most closeFlush) and returns how many are left, logging them lost.
func (rt *Runtime) flushBeforeClose(ctx context.Context) int {
	limit := time.NewTimer(closeFlush)
	defer limit.Stop()
	failures := 0
	for !rt.flush() {
		failures++
		t := time.NewTimer(heldBackoff.Delay(failures))
		select {
		case <-ctx.Done():
		case <-limit.C:
		case <-t.C:
			continue
		}
		t.Stop()
		j := &rt.journal
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, e := range j.lines {
			rt.log.Error("ledger line lost at shutdown: the ledger is not writable", "job_id", e.JobID, "run_id", e.RunID, "state", e.State, "error", j.failure())
		}
		return len(j.lines)
	}
	return 0
}

// Unsaved returns how many results are held in memory because the store
// could not be written: finished runs' completions and ledger lines. They
// are lost if the process ends before they are written.
func (rt *Runtime) Unsaved() int {
	rt.mu.Lock()
	n := 0
	for _, r := range rt.runs {
		if r.held != nil {
			n++
		}
	}
	rt.mu.Unlock()
	return n + int(rt.journal.backlog.Load())
}

// probe remembers the last check that the home can be written.
type probe struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

// StoreWritable reports whether the agent's home can be written. It is
// false, with the reason, while a finished run's result is held in memory
// because writing it failed, while ledger lines are held for the same
// reason, or while a probe fails: a small file created, written, synced
// and removed in the home and in its runs directory, at most every 2 s
// (at once after a failed write of jobs.json). It never waits for the
// store's lock, so health checks and metrics can call it freely.
func (rt *Runtime) StoreWritable() (bool, error) {
	rt.mu.Lock()
	var held []string
	var heldErr error
	for id, r := range rt.runs {
		if r.held != nil {
			held = append(held, id)
			heldErr = r.held
		}
	}
	rt.mu.Unlock()
	if len(held) > 0 {
		return false, fmt.Errorf("the result of %d finished run(s) is not stored yet (%s): %w", len(held), held[0], heldErr)
	}
	if n := rt.journal.backlog.Load(); n > 0 {
		return false, fmt.Errorf("%d ledger line(s) not written yet: %w", n, rt.journal.failure())
	}
	p := &rt.probe
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); p.at.IsZero() || now.Sub(p.at) >= probeEvery || (rt.store.WriteError() != nil && p.err == nil) {
		p.at = now
		p.err = errors.Join(atomicfile.Probe(rt.cfg.Home), atomicfile.Probe(rt.ledger.Dir()))
	}
	if p.err != nil {
		return false, p.err
	}
	return true, nil
}
