package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet discards logs.
var quiet = slog.New(slog.DiscardHandler)

// Relay secrets: the dispatcher signs with both; the NAS stand-in knows only
// the next one, as in the middle of a rotation.
var (
	oldKey  = []byte("old-relay-secret-0123456789abcdef")
	nextKey = []byte("next-relay-secret-0123456789abcdef")
)

// call is one relay call the NAS stand-in received.
type call struct {
	req      contract.RelayRequest
	id       string
	at       time.Time // when the request arrived
	finished time.Time // when it was answered
}

// reply is the stand-in's answer to one call.
type reply struct {
	status     int
	retryAfter string
	body       string
	hold       time.Duration // how long the "agent" takes
	gate       chan struct{} // when set, the call waits for a receive from it (or its cancellation)
}

var delivered = reply{status: 200, body: `{"status":"delivered","agent_status":"accepted"}`}

// nas is an httptest stand-in for NAS's relay route. It verifies every
// call's signature, records the calls and measures concurrency per agent.
type nas struct {
	t      *testing.T
	srv    *httptest.Server
	answer func(r contract.RelayRequest, n int) reply // n: calls so far for this schedule id, from 1

	mu        sync.Mutex
	calls     []call
	perID     map[string]int
	active    map[string]int
	maxActive map[string]int
	maxAll    int
	all       int
	badSigs   int
	arrived   chan call
	ctxErrs   []error
}

// newNAS starts a stand-in answering with answer.
func newNAS(t *testing.T, answer func(r contract.RelayRequest, n int) reply) *nas {
	t.Helper()
	n := &nas{
		t: t, answer: answer,
		perID: map[string]int{}, active: map[string]int{}, maxActive: map[string]int{},
		arrived: make(chan call, 1024),
	}
	n.srv = httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(n.srv.Close)
	return n
}

func (n *nas) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil || r.URL.Path != contract.PathRelay || r.Method != http.MethodPost {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if err := contract.VerifyWebhook([][]byte{nextKey}, r.Header.Get(contract.HeaderWebhookID),
		r.Header.Get(contract.HeaderWebhookTimestamp), r.Header.Get(contract.HeaderWebhookSignature),
		body, time.Now(), contract.WebhookTolerance); err != nil {
		n.mu.Lock()
		n.badSigs++
		n.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_signature"}`))
		return
	}
	var req contract.RelayRequest
	if err := contract.DecodeBytes(body, &req); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	n.mu.Lock()
	n.perID[req.ScheduleID]++
	count := n.perID[req.ScheduleID]
	n.active[req.AgentID]++
	n.maxActive[req.AgentID] = max(n.maxActive[req.AgentID], n.active[req.AgentID])
	n.all++
	n.maxAll = max(n.maxAll, n.all)
	n.mu.Unlock()

	rep := n.answer(req, count)
	if rep.gate != nil {
		select {
		case <-rep.gate:
		case <-r.Context().Done():
		}
	}
	if rep.hold > 0 {
		time.Sleep(rep.hold) // the agent doing its work
	}
	c := call{req: req, id: r.Header.Get(contract.HeaderWebhookID), at: at, finished: time.Now()}
	n.mu.Lock()
	n.active[req.AgentID]--
	n.all--
	n.calls = append(n.calls, c)
	n.ctxErrs = append(n.ctxErrs, r.Context().Err())
	n.mu.Unlock()
	if rep.retryAfter != "" {
		w.Header().Set(contract.HeaderRetryAfter, rep.retryAfter)
	}
	w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
	w.WriteHeader(rep.status)
	_, _ = w.Write([]byte(rep.body))
	n.arrived <- c
}

// snapshot returns the calls so far.
func (n *nas) snapshot() []call {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]call(nil), n.calls...)
}

// wait receives count calls or fails the test.
func (n *nas) wait(t *testing.T, count int, timeout time.Duration) []call {
	t.Helper()
	var got []call
	deadline := time.After(timeout)
	for len(got) < count {
		select {
		case c := <-n.arrived:
			got = append(got, c)
		case <-deadline:
			t.Fatalf("got %d relay calls within %s, want %d", len(got), timeout, count)
		}
	}
	return got
}

// recorder is a Metrics that counts.
type recorder struct {
	lags     atomic.Int64
	outcomes [4]atomic.Int64
	retries  atomic.Int64
	cold     atomic.Int64
	dead     atomic.Int64
}

func (r *recorder) ObserveFireLag(time.Duration)     { r.lags.Add(1) }
func (r *recorder) CountOutcome(k relay.OutcomeKind) { r.outcomes[k].Add(1) }
func (r *recorder) CountRetry(cold bool) {
	r.retries.Add(1)
	if cold {
		r.cold.Add(1)
	}
}
func (r *recorder) CountDeadLetter() { r.dead.Add(1) }

// bundle is what a dispatcher test works with.
type bundle struct {
	engine  *memory.Engine
	nas     *nas
	metrics *recorder
	stop    func() // cancels Run and waits for it to return
}

// setup starts a memory engine, a NAS stand-in answering with answer, and
// dispatchers (n of them) configured by cfg (Logger, Metrics and Keys set here).
func setup(t *testing.T, answer func(r contract.RelayRequest, n int) reply, cfg relay.DispatcherConfig, dispatchers int) *bundle {
	t.Helper()
	b := &bundle{engine: memory.New(memory.Options{}), nas: newNAS(t, answer), metrics: &recorder{}}
	t.Cleanup(func() { _ = b.engine.Close() })
	d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{
		NASURL: b.nas.srv.URL, Keys: [][]byte{oldKey, nextKey}, Timeout: 5 * time.Second,
		MaxConns: 16, Logger: quiet,
	})
	if err != nil {
		t.Fatalf("deliverer: %v", err)
	}
	cfg.Logger, cfg.Metrics = quiet, b.metrics
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range dispatchers {
		disp := relay.NewDispatcher(b.engine, d, cfg)
		wg.Go(func() {
			if err := disp.Run(ctx); err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	var once sync.Once
	b.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			d.Close()
		})
	}
	t.Cleanup(b.stop)
	return b
}

// armAt arms job of agent at fireAt.
func (b *bundle) armAt(t *testing.T, agent, job string, fireAt time.Time) relay.OneShot {
	t.Helper()
	res, err := b.engine.Arm(context.Background(), relay.ArmRequest{
		AgentID: agent, InstanceID: "i-" + agent, JobID: job, FireAt: fireAt,
		ScheduleID: fmt.Sprintf("%s.%s.%d", agent, job, fireAt.UnixNano()),
	})
	if err != nil {
		t.Fatalf("arm: %v", err)
	}
	return res.OneShot
}

// eventually polls cond until it holds or fails the test.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// empty waits until the engine holds no armed or leased one-shot.
func (b *bundle) empty(t *testing.T) {
	t.Helper()
	eventually(t, 5*time.Second, "engine drained", func() bool {
		s, err := b.engine.Stats(context.Background())
		return err == nil && s.Armed == 0
	})
}

func TestDispatcherDeliversOnTime(t *testing.T) {
	t.Parallel()
	// Recheck is an hour: only the timer and Wake can bring the fires on time.
	b := setup(t, func(contract.RelayRequest, int) reply { return delivered }, relay.DispatcherConfig{Recheck: time.Hour}, 1)
	base := time.Now().Add(100 * time.Millisecond)
	want := map[string]relay.OneShot{}
	for i, off := range []time.Duration{0, 37, 80, 81, 150} {
		s := b.armAt(t, fmt.Sprintf("agent%d", i%2), fmt.Sprintf("job%d", i), base.Add(off*time.Millisecond+300*time.Microsecond))
		want[s.ScheduleID] = s
	}
	for _, c := range b.nas.wait(t, len(want), 5*time.Second) {
		s, ok := want[c.req.ScheduleID]
		if !ok {
			t.Fatalf("unexpected call for %s", c.req.ScheduleID)
		}
		if c.at.Before(s.FireAt) {
			t.Errorf("%s delivered %s before fire_at", s.JobID, s.FireAt.Sub(c.at))
		}
		// A few milliseconds on an idle machine; the bound leaves room for a
		// loaded CI host while still failing any polling tick.
		if late := c.at.Sub(s.FireAt); late > 100*time.Millisecond {
			t.Errorf("%s delivered %s after fire_at, want within milliseconds", s.JobID, late)
		}
		if c.req.AgentID != s.AgentID || c.req.JobID != s.JobID || !c.req.FireAt.Equal(s.FireAt) || c.req.Attempt != 1 {
			t.Errorf("relay request %+v does not match %+v", c.req, s)
		}
		if !strings.HasPrefix(c.id, s.ScheduleID+".") {
			t.Errorf("webhook-id %q is not <schedule_id>.<token>", c.id)
		}
	}
	b.empty(t)
	b.stop()
	if n := len(b.nas.snapshot()); n != len(want) {
		t.Fatalf("%d calls, want %d", n, len(want))
	}
	b.nas.mu.Lock()
	bad := b.nas.badSigs
	b.nas.mu.Unlock()
	if bad != 0 {
		t.Fatalf("%d calls failed signature verification", bad)
	}
	if got := b.metrics.lags.Load(); got != int64(len(want)) {
		t.Fatalf("fire lag observed %d times, want %d", got, len(want))
	}
}

func TestDispatcherRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	fail := reply{status: 502, body: `{"error":"agent_unavailable","error_description":"agent answered 500"}`}
	b := setup(t, func(contract.RelayRequest, int) reply { return fail }, relay.DispatcherConfig{
		Retry: relay.RetryPolicy{Base: 20 * time.Millisecond, MaxDelay: 40 * time.Millisecond, MaxAttempts: 4, NoColdStart: true},
	}, 1)
	s := b.armAt(t, "a1", "job", time.Now())
	calls := b.nas.wait(t, 4, 5*time.Second)
	var dead []relay.DeadLetter
	eventually(t, 5*time.Second, "dead letter", func() bool {
		var err error
		dead, _, err = b.engine.ListDead(context.Background(), "a1", "", 10)
		return err == nil && len(dead) == 1
	})
	b.stop()
	if n := len(b.nas.snapshot()); n != 4 {
		t.Fatalf("%d calls, want 4", n)
	}
	for i, c := range calls {
		if c.req.Attempt != i+1 {
			t.Errorf("call %d has attempt %d", i, c.req.Attempt)
		}
		if i > 0 {
			if gap := c.at.Sub(calls[i-1].finished); gap < 20*time.Millisecond {
				t.Errorf("retry %d came %s after the failure, want at least the 20ms base", i, gap)
			}
		}
	}
	d := dead[0]
	if d.ScheduleID != s.ScheduleID || !strings.Contains(d.Reason, "gave up after 4 attempts") || !strings.Contains(d.Reason, "agent answered 500") {
		t.Fatalf("dead letter %+v", d)
	}
	failed, err := b.engine.ListFailed(context.Background(), "a1", time.Hour, 10)
	if err != nil || len(failed) != 1 {
		t.Fatalf("list failed = %v, %v", failed, err)
	}
	if r, dl := b.metrics.retries.Load(), b.metrics.dead.Load(); r != 3 || dl != 1 {
		t.Fatalf("metrics: %d retries, %d dead letters; want 3, 1", r, dl)
	}
	if got := b.metrics.outcomes[relay.Retry].Load(); got != 4 {
		t.Fatalf("metrics: %d retry outcomes, want 4", got)
	}
}

func TestDispatcherRejectedIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, func(contract.RelayRequest, int) reply {
		return reply{status: 200, body: `{"status":"rejected","agent_status":"","reason":"agent answered 404"}`}
	}, relay.DispatcherConfig{}, 1)
	b.armAt(t, "a1", "job", time.Now())
	b.nas.wait(t, 1, 5*time.Second)
	eventually(t, 5*time.Second, "dead letter", func() bool {
		dead, _, err := b.engine.ListDead(context.Background(), "", "", 10)
		return err == nil && len(dead) == 1 && strings.Contains(dead[0].Reason, "agent answered 404")
	})
	b.stop()
	if n := len(b.nas.snapshot()); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}

func TestDispatcherRetryAfterAndColdStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		first    reply
		retry    relay.RetryPolicy
		min, max time.Duration // the gap between the failure and the retry
		cold     int64
	}{
		{
			name:  "Retry-After honoured over a shorter ladder",
			first: reply{status: 503, retryAfter: "1", body: `{"error":"temporarily_unavailable"}`},
			retry: relay.RetryPolicy{Base: 20 * time.Millisecond, MaxDelay: 40 * time.Millisecond},
			min:   time.Second, max: 1500 * time.Millisecond,
		},
		{
			name:  "cold start retries faster than the ladder",
			first: reply{status: 503, body: `{"error":"agent_unavailable"}`},
			retry: relay.RetryPolicy{Base: 2 * time.Second, ColdStart: []time.Duration{30 * time.Millisecond}},
			min:   30 * time.Millisecond, max: 500 * time.Millisecond, cold: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(_ contract.RelayRequest, n int) reply {
				if n == 1 {
					return tc.first
				}
				return delivered
			}, relay.DispatcherConfig{Retry: tc.retry}, 1)
			b.armAt(t, "a1", "job", time.Now())
			calls := b.nas.wait(t, 2, 5*time.Second)
			b.empty(t)
			b.stop()
			gap := calls[1].at.Sub(calls[0].finished)
			if gap < tc.min || gap > tc.max {
				t.Fatalf("retry came %s after the failure, want in [%s, %s]", gap, tc.min, tc.max)
			}
			if got := b.metrics.cold.Load(); got != tc.cold {
				t.Fatalf("cold-start retries %d, want %d", got, tc.cold)
			}
		})
	}
}

func TestDispatcherPerAgentBound(t *testing.T) {
	t.Parallel()
	const hold = 25 * time.Millisecond
	b := setup(t, func(contract.RelayRequest, int) reply {
		r := delivered
		r.hold = hold
		return r
	}, relay.DispatcherConfig{Concurrency: 8, PerAgent: 2, Batch: 4}, 1)
	at := time.Now().Add(20 * time.Millisecond)
	for i := range 12 {
		b.armAt(t, "busy", fmt.Sprintf("j%02d", i), at)
	}
	for i := range 3 {
		b.armAt(t, "quiet", fmt.Sprintf("j%02d", i), at.Add(time.Millisecond))
	}
	calls := b.nas.wait(t, 15, 10*time.Second)
	b.empty(t)
	b.stop()
	b.nas.mu.Lock()
	maxBusy, maxQuiet, maxAll := b.nas.maxActive["busy"], b.nas.maxActive["quiet"], b.nas.maxAll
	b.nas.mu.Unlock()
	if maxBusy != 2 || maxQuiet != 2 {
		t.Fatalf("max concurrent per agent: busy %d, quiet %d; want 2 each", maxBusy, maxQuiet)
	}
	if maxAll < 3 {
		t.Fatalf("max concurrent overall %d: the quiet agent waited behind the busy one", maxAll)
	}
	// The quiet agent's fires, due after all of the busy agent's, must not
	// wait for the busy agent's backlog.
	var lastQuiet, lastBusy time.Time
	order := map[string][]string{}
	slices.SortFunc(calls, func(a, b call) int { return a.at.Compare(b.at) })
	for _, c := range calls {
		order[c.req.AgentID] = append(order[c.req.AgentID], c.req.JobID)
		if c.req.AgentID == "quiet" {
			lastQuiet = c.finished
		} else {
			lastBusy = c.finished
		}
	}
	if !lastQuiet.Before(lastBusy.Add(-2 * hold)) {
		t.Fatalf("quiet agent finished at %s, busy at %s: it was held behind", lastQuiet, lastBusy)
	}
	for agent, jobs := range order {
		// Deliveries start two at a time, so neighbours may arrive swapped,
		// but none may move further from its place in the due order.
		sorted := slices.Sorted(slices.Values(jobs))
		for i, j := range jobs {
			if k := slices.Index(sorted, j); k < i-2 || k > i+2 {
				t.Fatalf("agent %s delivered out of order: %v", agent, jobs)
			}
		}
	}
}

func TestDispatcherExtendsSlowDelivery(t *testing.T) {
	t.Parallel()
	slow := delivered
	slow.hold = 600 * time.Millisecond
	// Two dispatchers share the engine: if the lease lapsed, the other one
	// (or the reaper) would hand the fire out a second time.
	b := setup(t, func(contract.RelayRequest, int) reply { return slow }, relay.DispatcherConfig{LeaseFor: 100 * time.Millisecond}, 2)
	b.armAt(t, "a1", "job", time.Now())
	b.nas.wait(t, 1, 5*time.Second)
	b.empty(t)
	b.stop()
	if n := len(b.nas.snapshot()); n != 1 {
		t.Fatalf("%d calls, want 1: the lease lapsed during the slow delivery", n)
	}
	if got := b.metrics.outcomes[relay.Done].Load(); got != 1 {
		t.Fatalf("done outcomes %d, want 1", got)
	}
}

func TestDispatcherShutdownDrains(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := setup(t, func(contract.RelayRequest, int) reply {
		r := delivered
		r.gate = gate
		return r
	}, relay.DispatcherConfig{}, 1)
	b.armAt(t, "a1", "job", time.Now())
	eventually(t, 5*time.Second, "delivery in flight", func() bool {
		b.nas.mu.Lock()
		defer b.nas.mu.Unlock()
		return b.nas.all == 1
	})
	stopped := make(chan struct{})
	go func() {
		b.stop()
		close(stopped)
	}()
	// Run must wait for the delivery in flight; let it finish only now.
	gate <- struct{}{}
	<-stopped
	s, err := b.engine.Stats(context.Background())
	if err != nil || s != (relay.Stats{}) {
		t.Fatalf("stats after drain = %+v, %v; want the fire acked", s, err)
	}
	b.nas.mu.Lock()
	errs := b.nas.ctxErrs
	b.nas.mu.Unlock()
	if len(errs) != 1 || errs[0] != nil {
		t.Fatalf("the delivery was cut short: %v", errs)
	}
}

func TestDispatcherDrainTimeoutReturnsFire(t *testing.T) {
	t.Parallel()
	b := setup(t, func(contract.RelayRequest, int) reply {
		r := delivered
		r.gate = make(chan struct{}) // never opened: the call hangs until cancelled
		return r
	}, relay.DispatcherConfig{DrainTimeout: 50 * time.Millisecond}, 1)
	b.armAt(t, "a1", "job", time.Now())
	eventually(t, 5*time.Second, "delivery in flight", func() bool {
		b.nas.mu.Lock()
		defer b.nas.mu.Unlock()
		return b.nas.all == 1
	})
	b.stop()
	got, err := b.engine.Get(context.Background(), "a1", "job")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.State != relay.StateArmed || got.LastError == "" {
		t.Fatalf("after a cut-short delivery the fire is %+v, want armed again with a reason", got)
	}
}

func TestDispatcherRunTwice(t *testing.T) {
	t.Parallel()
	e := memory.New(memory.Options{})
	block := make(chan struct{})
	d := relay.NewDispatcher(e, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		<-block
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: "j", FireAt: time.Now(), ScheduleID: "s"}); err != nil {
		t.Fatalf("arm: %v", err)
	}
	eventually(t, 5*time.Second, "claim", func() bool {
		s, _ := e.Stats(ctx)
		return s.Leased == 1
	})
	if err := d.Run(ctx); !errors.Is(err, relay.ErrDispatcherRunning) {
		t.Fatalf("second Run = %v, want ErrDispatcherRunning", err)
	}
	cancel()
	close(block)
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	bad := relay.NewDispatcher(e, relay.DelivererFunc(nil), relay.DispatcherConfig{Batch: -1})
	if err := bad.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "Batch") {
		t.Fatalf("run with a bad config = %v", err)
	}
}

func TestHTTPDelivererSignsAndMaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		keys [][]byte
		rep  reply
		kind relay.OutcomeKind
		wait time.Duration
	}{
		{"delivered", [][]byte{oldKey, nextKey}, delivered, relay.Done, 0},
		{"signed with the next key only", [][]byte{nextKey}, delivered, relay.Done, 0},
		{"unknown key is refused and retried late", [][]byte{oldKey}, delivered, relay.Retry, time.Hour},
		{"429 with Retry-After", [][]byte{nextKey}, reply{status: 429, retryAfter: "9", body: `{"error":"rate_limited"}`}, relay.Retry, 9 * time.Second},
		{"400 is dead", [][]byte{nextKey}, reply{status: 400, body: `{"error":"invalid_request"}`}, relay.Dead, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newNAS(t, func(contract.RelayRequest, int) reply { return tc.rep })
			d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{
				NASURL: n.srv.URL + "/", Keys: tc.keys, UnauthorizedDelay: time.Hour, Logger: quiet,
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
			c := n.snapshot()[0]
			want := contract.RelayRequest{ScheduleID: "s1", AgentID: "a1", JobID: "j1", FireAt: contract.NewTime(l.FireAt), Attempt: 3}
			if c.id != "s1.42" || c.req != want {
				t.Fatalf("call id %q body %+v, want s1.42 %+v", c.id, c.req, want)
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

	slow := newNAS(t, func(contract.RelayRequest, int) reply {
		return reply{status: 200, body: `{"status":"delivered"}`, hold: time.Second}
	})
	d2, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: slow.srv.URL, Keys: [][]byte{nextKey}, Timeout: 50 * time.Millisecond, Logger: quiet})
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

func TestDispatcherExtendsWaitingLeases(t *testing.T) {
	t.Parallel()
	// One at a time to one agent, each call longer than half a lease: the
	// last fire waits several leases long for its turn. If its lease lapsed
	// while it waited, it would be handed out, and delivered, twice.
	slow := delivered
	slow.hold = 60 * time.Millisecond
	b := setup(t, func(contract.RelayRequest, int) reply { return slow },
		relay.DispatcherConfig{PerAgent: 1, LeaseFor: 100 * time.Millisecond}, 2)
	at := time.Now()
	for i := range 6 {
		b.armAt(t, "a1", fmt.Sprintf("j%d", i), at)
	}
	b.nas.wait(t, 6, 10*time.Second)
	b.empty(t)
	b.stop()
	b.nas.mu.Lock()
	defer b.nas.mu.Unlock()
	for id, n := range b.nas.perID {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	if len(b.nas.perID) != 6 || b.nas.maxActive["a1"] != 1 {
		t.Fatalf("%d fires delivered, %d at once; want 6, 1", len(b.nas.perID), b.nas.maxActive["a1"])
	}
}

func TestDispatcherCancelsDeliveryWhenLeaseLost(t *testing.T) {
	t.Parallel()
	b := setup(t, func(contract.RelayRequest, int) reply {
		r := delivered
		r.gate = make(chan struct{}) // only the lease's loss ends this call
		return r
	}, relay.DispatcherConfig{LeaseFor: 100 * time.Millisecond}, 1)
	b.armAt(t, "a1", "job", time.Now())
	eventually(t, 5*time.Second, "delivery in flight", func() bool {
		b.nas.mu.Lock()
		defer b.nas.mu.Unlock()
		return b.nas.all == 1
	})
	if ok, err := b.engine.Cancel(context.Background(), "a1", "job"); err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	c := b.nas.wait(t, 1, 5*time.Second)[0]
	b.stop()
	b.nas.mu.Lock()
	errs := b.nas.ctxErrs
	b.nas.mu.Unlock()
	if len(errs) != 1 || errs[0] == nil {
		t.Fatalf("the call for %s was not cancelled when its lease was lost: %v", c.req.JobID, errs)
	}
	if s, err := b.engine.Stats(context.Background()); err != nil || s != (relay.Stats{}) {
		t.Fatalf("stats = %+v, %v; want nothing left", s, err)
	}
}

func TestDispatcherShutdownReleasesWaitingFires(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := setup(t, func(contract.RelayRequest, int) reply {
		r := delivered
		r.gate = gate
		return r
	}, relay.DispatcherConfig{PerAgent: 1}, 1)
	at := time.Now()
	for i := range 3 {
		b.armAt(t, "a1", fmt.Sprintf("j%d", i), at)
	}
	eventually(t, 5*time.Second, "one delivery in flight, two waiting", func() bool {
		s, err := b.engine.Stats(context.Background())
		b.nas.mu.Lock()
		defer b.nas.mu.Unlock()
		return err == nil && s.Leased == 3 && b.nas.all == 1
	})
	stopped := make(chan struct{})
	go func() {
		b.stop()
		close(stopped)
	}()
	eventually(t, 5*time.Second, "waiting fires released", func() bool {
		s, err := b.engine.Stats(context.Background())
		return err == nil && s.Leased == 1 && s.Due == 2
	})
	gate <- struct{}{}
	<-stopped
	if n := len(b.nas.snapshot()); n != 1 {
		t.Fatalf("%d calls during shutdown, want only the one in flight", n)
	}
	s, err := b.engine.Stats(context.Background())
	if err != nil || s != (relay.Stats{Armed: 2, Due: 2}) {
		t.Fatalf("stats after shutdown = %+v, %v; want the two waiting fires armed and due", s, err)
	}
}

func TestDispatcherSurvivesPanickingDeliverer(t *testing.T) {
	t.Parallel()
	e := memory.New(memory.Options{})
	var calls atomic.Int64
	d := relay.NewDispatcher(e, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Logger: quiet, Retry: relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: "j", FireAt: time.Now(), ScheduleID: "s"}); err != nil {
		t.Fatalf("arm: %v", err)
	}
	eventually(t, 5*time.Second, "delivered after the panic", func() bool {
		s, err := e.Stats(ctx)
		return err == nil && s.Armed == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d deliveries, want 2", n)
	}
}
