package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	"github.com/chronoscron/chronos/relay/relaytest"
)

// The dispatcher's behaviour tests are relaytest.RunDispatcherSuite, run by
// each engine's package against that engine. Here: the HTTP deliverer.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet discards logs.
var quiet = slog.New(slog.DiscardHandler)

// Relay secrets: the deliverer signs with the keys it is given; the relay
// route stand-in knows only the next one, as in the middle of a rotation.
var (
	oldKey  = []byte("old-relay-secret-0123456789abcdef")
	nextKey = []byte("next-relay-secret-0123456789abcdef")
)

func TestHTTPDelivererSignsAndMaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		keys [][]byte
		rep  relaytest.Reply
		kind relay.OutcomeKind
		wait time.Duration
	}{
		{"delivered", [][]byte{oldKey, nextKey}, relaytest.Delivered, relay.Done, 0},
		{"signed with the next key only", [][]byte{nextKey}, relaytest.Delivered, relay.Done, 0},
		{"unknown key is refused and retried late", [][]byte{oldKey}, relaytest.Delivered, relay.Retry, time.Hour},
		{"429 with Retry-After", [][]byte{nextKey}, relaytest.Reply{Status: 429, RetryAfter: "9", Body: `{"error":"rate_limited"}`}, relay.Retry, 9 * time.Second},
		{"400 is dead", [][]byte{nextKey}, relaytest.Reply{Status: 400, Body: `{"error":"invalid_request"}`}, relay.Dead, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := relaytest.NewRelayRoute(t, [][]byte{nextKey}, func(contract.RelayRequest, int) relaytest.Reply { return tc.rep })
			d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{
				NASURL: n.URL() + "/", Keys: tc.keys, UnauthorizedDelay: time.Hour, Logger: quiet,
			})
			if err != nil {
				t.Fatalf("deliverer: %v", err)
			}
			defer d.Close()
			l := relay.Lease{OneShot: relay.OneShot{ScheduleID: "s1", AgentID: "a1", JobID: "j1",
				FireAt: time.Date(2026, 6, 1, 9, 0, 0, 500_000_000, time.UTC), Attempt: 3}, Token: 42}
			out := d.Deliver(context.Background(), l)
			if out.Kind != tc.kind || out.RetryAfter != tc.wait {
				t.Fatalf("outcome %+v, want kind %s wait %s", out, tc.kind, tc.wait)
			}
			if tc.kind == relay.Retry && tc.wait == time.Hour {
				return // refused before it was recorded
			}
			c := n.Calls()[0]
			want := contract.RelayRequest{ScheduleID: "s1", AgentID: "a1", JobID: "j1", FireAt: contract.NewTime(l.FireAt), Attempt: 3}
			if c.ID != "s1.42" || c.Req != want {
				t.Fatalf("call id %q body %+v, want s1.42 %+v", c.ID, c.Req, want)
			}
		})
	}
}

func TestHTTPDelivererNetworkErrorsRetry(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	url := srv.URL
	srv.Close() // nothing listens there any more
	d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: url, Keys: [][]byte{nextKey}, Timeout: time.Second, Logger: quiet})
	if err != nil {
		t.Fatalf("deliverer: %v", err)
	}
	defer d.Close()
	out := d.Deliver(context.Background(), relay.Lease{OneShot: relay.OneShot{ScheduleID: "s", FireAt: time.Now()}})
	if out.Kind != relay.Retry || out.ColdStart || !strings.Contains(out.Reason, "relay call") {
		t.Fatalf("outcome %+v, want a plain retry", out)
	}

	slow := relaytest.NewRelayRoute(t, [][]byte{nextKey}, func(contract.RelayRequest, int) relaytest.Reply {
		return relaytest.Reply{Status: 200, Body: `{"status":"delivered"}`, Hold: time.Second}
	})
	d2, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: slow.URL(), Keys: [][]byte{nextKey}, Timeout: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatalf("deliverer: %v", err)
	}
	defer d2.Close()
	start := time.Now()
	out = d2.Deliver(context.Background(), relay.Lease{OneShot: relay.OneShot{ScheduleID: "s", FireAt: time.Now()}})
	if out.Kind != relay.Retry || time.Since(start) > 900*time.Millisecond {
		t.Fatalf("outcome %+v after %s, want a retry at the 50ms timeout", out, time.Since(start))
	}
}

func TestNewHTTPDelivererValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []relay.HTTPDelivererConfig{
		{NASURL: "", Keys: [][]byte{nextKey}},
		{NASURL: "ftp://nas", Keys: [][]byte{nextKey}},
		{NASURL: "http://nas?x=1", Keys: [][]byte{nextKey}},
		{NASURL: "http://nas"},
		{NASURL: "http://nas", Keys: [][]byte{{}}},
		{NASURL: "http://nas", Keys: [][]byte{nextKey}, Timeout: -1},
	} {
		if _, err := relay.NewHTTPDeliverer(cfg); err == nil {
			t.Errorf("NewHTTPDeliverer(%+v) accepted", cfg)
		}
	}
}

// goroutineID returns the id of the calling goroutine, from its stack
// trace's first line ("goroutine 42 [running]:").
func goroutineID(t *testing.T) string {
	var buf [64]byte
	line := string(buf[:runtime.Stack(buf[:], false)])
	id, _, ok := strings.Cut(strings.TrimPrefix(line, "goroutine "), " ")
	if !ok {
		t.Errorf("no goroutine id in %q", line)
	}
	return id
}

// armBurst arms n jobs over agents, all due now, on a fresh memory engine.
func armBurst(t *testing.T, n, agents int) *memory.Engine {
	t.Helper()
	e := memory.New(memory.Options{})
	t.Cleanup(func() { _ = e.Close() })
	at := time.Now()
	for i := range n {
		if _, err := e.Arm(context.Background(), relay.ArmRequest{
			AgentID: fmt.Sprintf("agent%d", i%agents), JobID: fmt.Sprintf("job%03d", i),
			FireAt: at, ScheduleID: fmt.Sprintf("sch%03d", i),
		}); err != nil {
			t.Fatalf("arm: %v", err)
		}
	}
	return e
}

// runUntil runs d until done is closed, then stops it and waits for Run.
func runUntil(t *testing.T, d *relay.Dispatcher, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("the fires were not all delivered")
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestDispatcherReusesWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		concurrency int
		agents      int
		first       func() // the first delivery's fault, if any
		goroutines  int    // at most this many deliver
	}{
		{"two workers", 2, 4, nil, 2},
		{"one worker survives a panic", 1, 4, func() { panic("boom") }, 1},
		// The worker ends with the delivery; another takes over.
		{"a deliverer ending its goroutine", 1, 4, runtime.Goexit, 2},
		// One agent, two slots: the agent's next fire waits in the store
		// for the first; a worker may start for it while the one that
		// ended is still being accounted for, so three goroutines may
		// deliver over the run, never more than two at once.
		{"a deliverer ending its goroutine, the next fire waiting", 2, 1, runtime.Goexit, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const fires = 40
			e := armBurst(t, fires, tc.agents)
			var (
				mu      sync.Mutex
				workers = map[string]bool{}
				per     = map[string]int{}
				calls   int
			)
			all := make(chan struct{})
			d := relay.NewDispatcher(e, relay.DelivererFunc(func(_ context.Context, l relay.Lease) relay.Outcome {
				mu.Lock()
				workers[goroutineID(t)] = true
				calls++
				fault := tc.first != nil && calls == 1
				if !fault {
					if per[l.JobID]++; len(per) == fires && per[l.JobID] == 1 {
						close(all)
					}
				}
				mu.Unlock()
				if fault {
					tc.first()
				}
				return relay.Outcome{Kind: relay.Done}
			}), relay.DispatcherConfig{Concurrency: tc.concurrency, PerAgent: 1, Logger: quiet,
				Retry: relay.RetryPolicy{Base: time.Millisecond, MaxDelay: time.Millisecond}})
			runUntil(t, d, all)
			mu.Lock()
			defer mu.Unlock()
			for job, n := range per {
				if n != 1 {
					t.Errorf("%s delivered %d times", job, n)
				}
			}
			if len(per) != fires || len(workers) > tc.goroutines {
				t.Fatalf("%d fires delivered on %d goroutines; want %d on at most %d", len(per), len(workers), fires, tc.goroutines)
			}
			if s, err := e.Stats(context.Background()); err != nil || s != (relay.Stats{}) {
				t.Fatalf("stats after the drain = %+v, %v", s, err)
			}
		})
	}
}

// deadlines is a Queue whose acks record how long their context had left.
type deadlines struct {
	relay.Queue
	mu   sync.Mutex
	left []time.Duration
	errs []error
	n    int
	all  chan struct{}
}

func (q *deadlines) Ack(ctx context.Context, l relay.Lease) error {
	q.mu.Lock()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	q.left = append(q.left, time.Until(dl))
	q.errs = append(q.errs, ctx.Err())
	if len(q.left) == q.n {
		close(q.all)
	}
	q.mu.Unlock()
	return q.Queue.Ack(ctx, l)
}

func TestDispatcherBoundsEachAck(t *testing.T) {
	t.Parallel()
	const fires, timeout = 200, time.Minute
	q := &deadlines{Queue: armBurst(t, fires, 20), n: fires, all: make(chan struct{})}
	d := relay.NewDispatcher(q, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Concurrency: 4, OpTimeout: timeout, Logger: quiet})
	runUntil(t, d, q.all)
	q.mu.Lock()
	defer q.mu.Unlock()
	// Each ack gets at most OpTimeout and at least 98% of it (with 10% of
	// room for a slow scheduler here).
	for i, left := range q.left {
		if left > timeout || left < timeout*9/10 || q.errs[i] != nil {
			t.Fatalf("ack %d had %s left (ctx err %v); want between 90%% of %s and all of it", i, left, q.errs[i], timeout)
		}
	}
}

func TestDispatcherRefillsASingleFreedSlot(t *testing.T) {
	t.Parallel()
	const fires, slots = 20, 8
	e := armBurst(t, fires, fires)
	started := make(chan string, fires)
	release := make(chan struct{})
	var delivered sync.WaitGroup
	delivered.Add(fires)
	d := relay.NewDispatcher(e, relay.DelivererFunc(func(ctx context.Context, l relay.Lease) relay.Outcome {
		started <- l.JobID
		select {
		case <-release:
		case <-ctx.Done():
			return relay.Outcome{Kind: relay.Retry, Reason: "cancelled"}
		}
		delivered.Done()
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Concurrency: slots, Batch: slots, Recheck: time.Hour, DrainTimeout: 100 * time.Millisecond, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-ran; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}
	defer stop()
	// next waits for the next delivery to start.
	next := func(what string) {
		t.Helper()
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not start", what)
		}
	}
	for i := range slots {
		next(fmt.Sprintf("delivery %d of the first claim", i+1))
	}
	// Each delivery that ends frees one slot, less than the quarter of a
	// batch a busy dispatcher waits for just after a claim: the slot is
	// refilled all the same, once the short refill pause is over.
	for i := range 3 {
		release <- struct{}{}
		next(fmt.Sprintf("the delivery refilling freed slot %d", i+1))
	}
	close(release)
	delivered.Wait()
	stop() // Run returns once every delivery is settled
	if s, err := e.Stats(context.Background()); err != nil || s != (relay.Stats{}) {
		t.Fatalf("stats after the drain = %+v, %v", s, err)
	}
}
