package runs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/runner"
)

// Errors of runs.
var (
	// ErrDraining refuses new claims while the runtime closes.
	ErrDraining = errors.New("agent is shutting down")
	// ErrShutdown is the cause given to runs stopped by the runtime's
	// Close.
	ErrShutdown = errors.New("agent shut down")
	// ErrCancelled is the cause given to runs stopped on request (runs
	// cancel). It is the runner's ErrCancelled, so a shell run's process
	// group gets SIGTERM first and is killed only 2 s later.
	ErrCancelled = runner.ErrCancelled
)

// Run is a run of this process, from its claim until its result is
// durable.
type Run struct {
	Ctx    context.Context
	JobID  string
	Token  uint64
	cancel context.CancelCauseFunc
	done   chan struct{}

	// Guarded by Registry.mu:
	procs []runner.Process // its long-lived processes, to record
	held  error            // why its finished result is not stored yet
}

// Cancel stops the run with cause.
func (r *Run) Cancel(cause error) { r.cancel(cause) }

// Registry is the runs of this process by run id. It is safe for
// concurrent use.
type Registry struct {
	mu      sync.Mutex
	runs    map[string]*Run
	closing atomic.Bool
	wg      sync.WaitGroup
	persist chan struct{} // a run's processes changed: record them soon
	giveUp  chan struct{} // closed when Close stops waiting for results
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{runs: map[string]*Run{}, persist: make(chan struct{}, 1), giveUp: make(chan struct{})}
}

// Register records a run about to start in this process, so the reaper
// treats its claim as live from the moment it is written. It refuses while
// the runtime closes.
func (g *Registry) Register(jobID string, c job.Claim) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing.Load() {
		return ErrDraining
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	g.runs[c.RunID] = &Run{Ctx: ctx, JobID: jobID, Token: c.Token, cancel: cancel, done: make(chan struct{})}
	g.wg.Add(1)
	return nil
}

// Unregister drops runs registered by an update that was not committed.
func (g *Registry) Unregister(ids []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range ids {
		if r, ok := g.runs[id]; ok {
			r.cancel(errors.New("claim not committed"))
			close(r.done)
			delete(g.runs, id)
			g.wg.Done()
		}
	}
}

// Active reports whether run runID, under token, is this process's.
func (g *Registry) Active(runID string, token uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.runs[runID]
	return ok && r.Token == token
}

// Get returns run runID under token, or nil.
func (g *Registry) Get(runID string, token uint64) *Run {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.runs[runID]; r != nil && r.Token == token {
		return r
	}
	return nil
}

// Cancel stops run runID with cause, if it is this process's.
func (g *Registry) Cancel(runID string, cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.runs[runID]; ok {
		r.cancel(cause)
	}
}

// Done returns a channel closed when the local run ends, or nil.
func (g *Registry) Done(runID string) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.runs[runID]; ok {
		return r.done
	}
	return nil
}

// End drops run r, whose result is stored (or given up).
func (g *Registry) End(runID string, r *Run) {
	g.mu.Lock()
	delete(g.runs, runID)
	g.mu.Unlock()
	close(r.done)
	g.wg.Done()
}

// NoteProcs keeps the latest list of a run's processes and asks the lease
// renewal to record it (see Persist).
func (g *Registry) NoteProcs(r *Run, ps []runner.Process) {
	g.mu.Lock()
	r.procs = append(r.procs[:0:0], ps...)
	g.mu.Unlock()
	select {
	case g.persist <- struct{}{}:
	default:
	}
}

// Persist is signalled when a run's processes changed.
func (g *Registry) Persist() <-chan struct{} { return g.persist }

// SetHeld notes why run r's finished result is not stored yet (nil: it is).
func (g *Registry) SetHeld(r *Run, err error) {
	g.mu.Lock()
	r.held = err
	g.mu.Unlock()
}

// Held returns the ids of the runs whose finished result is not stored
// yet, and the last reason.
func (g *Registry) Held() ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	var err error
	for id, r := range g.runs {
		if r.held != nil {
			ids = append(ids, id)
			err = r.held
		}
	}
	return ids, err
}

// Len returns the number of runs in progress; a run that has ended counts
// until its result is stored.
func (g *Registry) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.runs)
}

// Live is one run as Snapshot saw it.
type Live struct {
	Run   *Run
	Procs []runner.Process
}

// Snapshot returns the runs in progress by run id, with their processes.
func (g *Registry) Snapshot() map[string]Live {
	g.mu.Lock()
	defer g.mu.Unlock()
	live := make(map[string]Live, len(g.runs))
	for id, r := range g.runs {
		live[id] = Live{Run: r, Procs: r.procs}
	}
	return live
}

// JobIDs returns the ids of the jobs this process runs now.
func (g *Registry) JobIDs() map[string]struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	jobs := make(map[string]struct{}, len(g.runs))
	for _, r := range g.runs {
		jobs[r.JobID] = struct{}{}
	}
	return jobs
}

// Close refuses new runs from now on; it reports whether it was already
// closed.
func (g *Registry) Close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closing.Swap(true)
}

// Closing reports whether Close was called.
func (g *Registry) Closing() bool { return g.closing.Load() }

// Wait waits until every run has ended and its result is stored.
func (g *Registry) Wait() { g.wg.Wait() }

// StopWaiting stops every run with cause and gives up results that cannot
// be stored (see GiveUp).
func (g *Registry) StopWaiting(cause error) {
	g.mu.Lock()
	for _, r := range g.runs {
		r.cancel(cause)
	}
	g.mu.Unlock()
	close(g.giveUp)
}

// GiveUp is closed when results that cannot be stored are given up.
func (g *Registry) GiveUp() <-chan struct{} { return g.giveUp }
