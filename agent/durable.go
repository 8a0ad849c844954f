package agent

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chronoscron/chronos/internal/atomicfile"
)

// Results that cannot be written at once (a full disk, a read-only home)
// are held in memory and written again, with backoff, until they are
// durable: a run's completion in jobs.json (package lifecycle's
// Settlement) and ledger lines (package held). Meanwhile the runtime
// reports the store unwritable.

// probeEvery bounds how often StoreWritable probes the home.
const probeEvery = 2 * time.Second

// Unsaved returns how many results are held in memory because the store
// could not be written: finished runs' completions and ledger lines. They
// are lost if the process ends before they are written.
func (rt *Runtime) Unsaved() int {
	held, _ := rt.runs.Held()
	return len(held) + int(rt.lines.Backlog())
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
	held, heldErr := rt.runs.Held()
	if len(held) > 0 {
		return false, fmt.Errorf("the result of %d finished run(s) is not stored yet (%s): %w", len(held), held[0], heldErr)
	}
	if n := rt.lines.Backlog(); n > 0 {
		return false, fmt.Errorf("%d ledger line(s) not written yet: %w", n, rt.lines.Failure())
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
