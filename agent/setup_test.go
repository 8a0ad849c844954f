package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// gate is a host-defined runner whose runs block until released; it records
// the run ids it saw.
type gate struct {
	mu      sync.Mutex
	started chan string
	release map[string]chan error
	all     chan error // closes every run when closed
}

func newGate() *gate {
	return &gate{started: make(chan string, 100), release: map[string]chan error{}, all: make(chan error)}
}

func (g *gate) Validate(runner.Payload) error { return nil }

func (g *gate) ch(runID string) chan error {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.release[runID]
	if !ok {
		c = make(chan error, 1)
		g.release[runID] = c
	}
	return c
}

func (g *gate) Run(ctx context.Context, req runner.Request) runner.Result {
	c := g.ch(req.RunID)
	g.started <- req.RunID
	select {
	case err := <-c:
		return runner.Result{Err: err}
	case <-g.all:
		return runner.Result{}
	case <-ctx.Done():
		return runner.Result{Err: context.Cause(ctx)}
	}
}

// finish lets run id end with err.
func (g *gate) finish(id string, err error) { g.ch(id) <- err }

type bundle struct {
	rt    *Runtime
	clock *fakeClock
	gate  *gate
	home  string
}

var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

func setup(t testing.TB, mod ...func(*Config)) *bundle {
	t.Helper()
	b := &bundle{clock: &fakeClock{t: t0}, gate: newGate(), home: t.TempDir()}
	cfg := Config{Home: b.home, Now: b.clock.Now, Runners: map[string]runner.Runner{"gate": b.gate}, Retention: -1, WriteFile: writeFile, AppendFile: appendFile}
	for _, m := range mod {
		m(&cfg)
	}
	rt, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.rt = rt
	t.Cleanup(func() {
		close(b.gate.all)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

// add creates a job; the payload defaults to the gate runner.
func (b *bundle) add(t testing.TB, spec JobSpec) job.Job {
	t.Helper()
	if spec.Payload.Kind == "" {
		spec.Payload = runner.Payload{Kind: "gate"}
	}
	j, _, err := b.rt.AddJob(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (b *bundle) fire(t *testing.T, id string, slot time.Time) FireResult {
	t.Helper()
	res, err := b.rt.Fire(context.Background(), id, slot, TriggerScheduled)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (b *bundle) started(t *testing.T) string {
	t.Helper()
	select {
	case id := <-b.gate.started:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no run started")
		return ""
	}
}

func (b *bundle) wait(t testing.TB, runID string) ledger.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := b.rt.Wait(ctx, runID, t0.Add(-48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (b *bundle) runs(t *testing.T, jobID string) []ledger.Run {
	t.Helper()
	rs, err := b.rt.Ledger().Runs(context.Background(), ledger.Filter{JobID: jobID})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func (b *bundle) job(t *testing.T, id string) job.Job {
	t.Helper()
	j, err := b.rt.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// states counts the final state of each run of job.
func (b *bundle) states(t *testing.T, jobID string) map[ledger.State]int {
	t.Helper()
	out := map[ledger.State]int{}
	for _, r := range b.runs(t, jobID) {
		out[r.State]++
	}
	return out
}
