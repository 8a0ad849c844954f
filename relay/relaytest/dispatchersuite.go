package relaytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// RunDispatcherSuite runs the dispatcher's behaviour tests against engines of
// f: real dispatchers and a real relay.HTTPDeliverer, calling a RelayRoute
// over loopback HTTP, on the real clock. Every test runs in parallel on its
// own engine. When f.Peer is set, tests of dispatchers that learn from
// another process's engine run too.
func RunDispatcherSuite(t *testing.T, f Factory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("relaytest: Factory.New is required")
	}
	runEach(t, f, dispatcherTests)
	runEach(t, f, flowDispatcherTests)
	if f.Peer == nil {
		return
	}
	for _, tc := range peerTests {
		t.Run("peer/"+tc.name, func(t *testing.T) {
			t.Parallel()
			e := f.New(t)
			tc.run(t, e, f.Peer(t, e))
		})
	}
}

// dispatcherTests run with one engine.
var dispatcherTests = []engineTest{
	{"DeliversOnTime", testDispatchDeliversOnTime},
	{"RetriesThenDeadLetters", testDispatchRetriesThenDeadLetters},
	{"RetriesFollowTheLadder", testDispatchRetriesFollowTheLadder},
	{"RejectedIsDeadAtOnce", testDispatchRejectedIsDeadAtOnce},
	{"RetryAfterHonoured", testDispatchRetryAfterHonoured},
	{"ColdStartRetriesFast", testDispatchColdStartRetriesFast},
	{"PerAgentBound", testDispatchPerAgentBound},
	{"ExtendsSlowDelivery", testDispatchExtendsSlowDelivery},
	{"ExtendsWaitingLeases", testDispatchExtendsWaitingLeases},
	{"ShutdownDrains", testDispatchShutdownDrains},
	{"DrainTimeoutReturnsFire", testDispatchDrainTimeoutReturnsFire},
	{"HeldFiresWaitInStore", testDispatchHeldFiresWaitInStore},
	{"CancelsDeliveryWhenLeaseLost", testDispatchCancelsDeliveryWhenLeaseLost},
	{"KeepsLeasesOfAFailedClaim", testDispatchKeepsLeasesOfAFailedClaim},
	{"BacksOffAfterStoreErrors", testDispatchBacksOffAfterStoreErrors},
	{"RunTwice", testDispatchRunTwice},
	{"SurvivesPanickingDeliverer", testDispatchSurvivesPanickingDeliverer},
	{"RecordsDeadLetteredFireAsLastFire", testDispatchRecordsDeadLetteredFireAsLastFire},
	{"WritesRecordWithAck", testDispatchWritesRecordWithAck},
}

// peerTests run with two engines on one store, as two processes share it.
var peerTests = []struct {
	name string
	run  func(t *testing.T, e, peer relay.Engine)
}{
	{"NackWakesDispatcher", testPeerNackWakesDispatcher},
	{"ReplayWakesDispatcher", testPeerReplayWakesDispatcher},
	{"ParallelismAcrossProcesses", testPeerParallelismAcrossProcesses},
}

// quiet discards logs.
var quiet = slog.New(slog.DiscardHandler)

// Relay secrets: the dispatcher signs with both; the relay route knows only
// the next one, as in the middle of a rotation.
var (
	oldKey  = []byte("old-relay-secret-0123456789abcdef")
	nextKey = []byte("next-relay-secret-0123456789abcdef")
)

// failing is a relay route's answer for an agent that failed: a plain retry.
var failing = Reply{Status: http.StatusBadGateway, Body: `{"error":"agent_unavailable","error_description":"agent answered 500"}`}

// recorder is a relay.Metrics that counts.
type recorder struct {
	lags     atomic.Int64
	outcomes [4]atomic.Int64
	retries  atomic.Int64
	cold     atomic.Int64
	dead     atomic.Int64
}

func (r *recorder) ObserveFireLag(time.Duration)     { r.lags.Add(1) }
func (r *recorder) CountOutcome(k relay.OutcomeKind) { r.outcomes[k].Add(1) }
func (r *recorder) CountRetry(ladder relay.Ladder) {
	r.retries.Add(1)
	if ladder == relay.ColdStartLadder {
		r.cold.Add(1)
	}
}
func (r *recorder) CountDeadLetter() { r.dead.Add(1) }

// dispatch is what a dispatcher test works with.
type dispatch struct {
	engine  relay.Engine
	route   *RelayRoute
	metrics *recorder
	stop    func() // cancels Run and waits for it to return
	cancel  func() // cancels Run without waiting: no claim starts after it
}

// dispatchOptions says what startDispatchers starts.
type dispatchOptions struct {
	// queue is what the dispatchers claim from; default the engine.
	queue relay.Queue
	// answer is the relay route's answer to every delivery.
	answer AnswerFunc
	// cfg configures each dispatcher; Logger and Metrics are set by
	// startDispatchers.
	cfg relay.DispatcherConfig
	// n is how many dispatchers run; default 1.
	n int
}

// startDispatchers starts the dispatchers of o on e that deliver to a relay
// route answering with o.answer.
func startDispatchers(t *testing.T, e relay.Engine, o dispatchOptions) *dispatch {
	t.Helper()
	q, cfg := o.queue, o.cfg
	if q == nil {
		q = e
	}
	b := &dispatch{engine: e, route: NewRelayRoute(t, [][]byte{nextKey}, o.answer), metrics: &recorder{}}
	d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{
		NASURL: b.route.URL(), Keys: [][]byte{oldKey, nextKey}, Timeout: 5 * time.Second,
		MaxConns: 16, Logger: quiet,
	})
	if err != nil {
		t.Fatalf("deliverer: %v", err)
	}
	cfg.Logger, cfg.Metrics = quiet, b.metrics
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range max(o.n, 1) {
		disp := relay.NewDispatcher(q, d, cfg)
		wg.Go(func() {
			if err := disp.Run(ctx); err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	var once sync.Once
	b.cancel = cancel
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

// startDispatch starts n dispatchers on e.
func startDispatch(t *testing.T, e relay.Engine, answer AnswerFunc, cfg relay.DispatcherConfig, n int) *dispatch {
	t.Helper()
	return startDispatchers(t, e, dispatchOptions{answer: answer, cfg: cfg, n: n})
}

// always answers every call with rep.
func always(rep Reply) AnswerFunc {
	return func(contract.RelayRequest, int) Reply { return rep }
}

// armAt arms job of agent at fireAt with a schedule id of its own.
func armAt(t *testing.T, e relay.Engine, agent, job string, fireAt time.Time) relay.OneShot {
	t.Helper()
	res, err := e.Arm(ctxT(t), relay.ArmRequest{
		AgentID: agent, InstanceID: "i-" + agent, JobID: job, FireAt: fireAt,
		ScheduleID: fmt.Sprintf("%s.%s.%s", agent, job, newID()),
	})
	noErr(t, err, "arm "+agent+"/"+job)
	return res.OneShot
}

// drained waits until the engine holds no armed or leased one-shot.
func drained(t *testing.T, e relay.Engine) {
	t.Helper()
	eventually(t, 5*time.Second, "engine drained", func() bool {
		s, err := e.Stats(ctxT(t))
		return err == nil && s.Armed == 0
	})
}

// inFlight waits until the relay route is answering n calls.
func inFlight(t *testing.T, r *RelayRoute, n int) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%d deliveries in flight", n), func() bool { return r.InFlight() == n })
}

func testDispatchDeliversOnTime(t *testing.T, e relay.Engine) {
	// Recheck is an hour: only the timer and Wake can bring the fires on time.
	b := startDispatch(t, e, always(Delivered), relay.DispatcherConfig{Recheck: time.Hour}, 1)
	base := time.Now().Add(100 * time.Millisecond)
	want := map[string]relay.OneShot{}
	for i, off := range []time.Duration{0, 37, 80, 81, 150} {
		s := armAt(t, e, fmt.Sprintf("agent%d", i%2), fmt.Sprintf("job%d", i), base.Add(off*time.Millisecond+300*time.Microsecond))
		want[s.ScheduleID] = s
	}
	for _, c := range b.route.Wait(t, len(want), 5*time.Second) {
		s, ok := want[c.Req.ScheduleID]
		if !ok {
			t.Fatalf("unexpected call for %s", c.Req.ScheduleID)
		}
		if c.At.Before(s.FireAt) {
			t.Errorf("%s delivered %s before fire_at", s.JobID, s.FireAt.Sub(c.At))
		}
		// A few milliseconds on an idle machine. The bound only has to fail
		// the 30 s recheck of a dispatcher that was not woken; the lag itself
		// is measured by the benchmarks, not asserted on a shared host.
		if late := c.At.Sub(s.FireAt); late > time.Second {
			t.Errorf("%s delivered %s after fire_at, want it woken, not at a recheck", s.JobID, late)
		}
		if c.Req.AgentID != s.AgentID || c.Req.JobID != s.JobID || !c.Req.FireAt.Equal(s.FireAt) || c.Req.Attempt != 1 {
			t.Errorf("relay request %+v does not match %+v", c.Req, s)
		}
		if !strings.HasPrefix(c.ID, s.ScheduleID+".") {
			t.Errorf("webhook-id %q is not <schedule_id>.<token>", c.ID)
		}
	}
	drained(t, e)
	b.stop()
	if n := len(b.route.Calls()); n != len(want) {
		t.Fatalf("%d calls, want %d", n, len(want))
	}
	if bad := b.route.BadSignatures(); bad != 0 {
		t.Fatalf("%d calls failed signature verification", bad)
	}
	if got := b.metrics.lags.Load(); got != int64(len(want)) {
		t.Fatalf("fire lag observed %d times, want %d", got, len(want))
	}
}

func testDispatchRetriesThenDeadLetters(t *testing.T, e relay.Engine) {
	b := startDispatch(t, e, always(failing), relay.DispatcherConfig{
		Retry: relay.RetryPolicy{Base: 20 * time.Millisecond, MaxDelay: 40 * time.Millisecond, MaxAttempts: 4, NoColdStart: true},
	}, 1)
	s := armAt(t, e, "a1", "job", time.Now())
	calls := b.route.Wait(t, 4, 5*time.Second)
	var dead []relay.DeadLetter
	eventually(t, 5*time.Second, "dead letter", func() bool {
		var err error
		dead, _, err = e.ListDead(ctxT(t), "a1", "", 10)
		return err == nil && len(dead) == 1
	})
	b.stop()
	if n := len(b.route.Calls()); n != 4 {
		t.Fatalf("%d calls, want 4", n)
	}
	for i, c := range calls {
		if c.Req.Attempt != i+1 {
			t.Errorf("call %d has attempt %d", i, c.Req.Attempt)
		}
		if i > 0 {
			if gap := c.At.Sub(calls[i-1].Finished); gap < 20*time.Millisecond {
				t.Errorf("retry %d came %s after the failure, want at least the 20ms base", i, gap)
			}
		}
	}
	d := dead[0]
	if d.ScheduleID != s.ScheduleID || !strings.Contains(d.Reason, "gave up after 4 attempts") || !strings.Contains(d.Reason, "agent answered 500") {
		t.Fatalf("dead letter %+v", d)
	}
	failed, err := e.ListFailed(ctxT(t), "a1", time.Hour, 10)
	if err != nil || len(failed) != 1 || failed[0].ScheduleID != s.ScheduleID {
		t.Fatalf("failed fires of the agent = %v, %v; want the dead letter", failed, err)
	}
	if r, dl := b.metrics.retries.Load(), b.metrics.dead.Load(); r != 3 || dl != 1 {
		t.Fatalf("metrics: %d retries, %d dead letters; want 3, 1", r, dl)
	}
	if got := b.metrics.outcomes[relay.Retry].Load(); got != 4 {
		t.Fatalf("metrics: %d retry outcomes, want 4", got)
	}
}

// testDispatchRetriesFollowTheLadder fails a delivery three times and checks
// each retry comes at its step of the ladder (within a fifth), not at a
// recheck: the nack must wake the dispatcher. Jitter is pinned to the top of
// each step so the ladder is exact: 400ms, 800ms, 1.6s.
func testDispatchRetriesFollowTheLadder(t *testing.T, e relay.Engine) {
	const base = 400 * time.Millisecond
	b := startDispatch(t, e, func(_ contract.RelayRequest, n int) Reply {
		if n <= 3 {
			return failing
		}
		return Delivered
	}, relay.DispatcherConfig{
		Recheck: time.Hour,
		Retry:   relay.RetryPolicy{Base: base, MaxDelay: time.Minute, NoColdStart: true},
		Rand:    func(n int64) int64 { return n - 1 },
	}, 1)
	armAt(t, e, "a1", "job", time.Now())
	calls := b.route.Wait(t, 4, 10*time.Second)
	drained(t, e)
	b.stop()
	for i, want := range []time.Duration{base, 2 * base, 4 * base} {
		c := calls[i+1]
		if c.Req.Attempt != i+2 {
			t.Fatalf("call %d has attempt %d, want %d", i+1, c.Req.Attempt, i+2)
		}
		gap := c.At.Sub(calls[i].Finished)
		if lo, hi := want-want/5, want+want/5; gap < lo || gap > hi {
			t.Errorf("retry %d came %s after the failure, want %s ± 20%%", i+1, gap, want)
		}
	}
}

func testDispatchRejectedIsDeadAtOnce(t *testing.T, e relay.Engine) {
	b := startDispatch(t, e, always(Reply{Status: 200, Body: `{"status":"rejected","agent_status":"","reason":"agent answered 404"}`}),
		relay.DispatcherConfig{}, 1)
	armAt(t, e, "a1", "job", time.Now())
	b.route.Wait(t, 1, 5*time.Second)
	eventually(t, 5*time.Second, "dead letter", func() bool {
		dead, _, err := e.ListDead(ctxT(t), "", "", 10)
		return err == nil && len(dead) == 1 && strings.Contains(dead[0].Reason, "agent answered 404")
	})
	b.stop()
	if n := len(b.route.Calls()); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}

// retriedAfter fails the first delivery with first under policy and
// returns the gap between that failure and the retry, and the count of
// cold-start retries.
func retriedAfter(t *testing.T, e relay.Engine, first Reply, policy relay.RetryPolicy) (time.Duration, int64) {
	t.Helper()
	b := startDispatch(t, e, func(_ contract.RelayRequest, n int) Reply {
		if n == 1 {
			return first
		}
		return Delivered
	}, relay.DispatcherConfig{Retry: policy}, 1)
	armAt(t, e, "a1", "job", time.Now())
	calls := b.route.Wait(t, 2, 5*time.Second)
	drained(t, e)
	b.stop()
	return calls[1].At.Sub(calls[0].Finished), b.metrics.cold.Load()
}

func testDispatchRetryAfterHonoured(t *testing.T, e relay.Engine) {
	// The agent's Retry-After is longer than the whole ladder.
	gap, cold := retriedAfter(t, e, Reply{Status: 503, RetryAfter: "1", Body: `{"error":"temporarily_unavailable"}`},
		relay.RetryPolicy{Base: 20 * time.Millisecond, MaxDelay: 40 * time.Millisecond})
	if gap < time.Second || gap > 1500*time.Millisecond {
		t.Fatalf("retry came %s after the failure, want after the 1s Retry-After", gap)
	}
	equal(t, cold, 0, "cold-start retries")
}

func testDispatchColdStartRetriesFast(t *testing.T, e relay.Engine) {
	// A waking agent (503 agent_unavailable) is retried on the cold-start
	// ladder, far faster than the normal one.
	gap, cold := retriedAfter(t, e, Reply{Status: 503, Body: `{"error":"agent_unavailable"}`},
		relay.RetryPolicy{Base: 2 * time.Second, ColdStart: []time.Duration{30 * time.Millisecond}})
	if gap < 30*time.Millisecond || gap > 500*time.Millisecond {
		t.Fatalf("retry came %s after the failure, want the 30ms cold-start step", gap)
	}
	equal(t, cold, 1, "cold-start retries")
}

func testDispatchPerAgentBound(t *testing.T, e relay.Engine) {
	const hold = 25 * time.Millisecond
	slow := Delivered
	slow.Hold = hold
	b := startDispatch(t, e, always(slow), relay.DispatcherConfig{Concurrency: 8, PerAgent: 2, Batch: 4}, 1)
	at := time.Now().Add(20 * time.Millisecond)
	for i := range 12 {
		armAt(t, e, "busy", fmt.Sprintf("j%02d", i), at)
	}
	for i := range 3 {
		armAt(t, e, "quiet", fmt.Sprintf("j%02d", i), at.Add(time.Millisecond))
	}
	calls := b.route.Wait(t, 15, 10*time.Second)
	drained(t, e)
	b.stop()
	maxBusy, maxAll := b.route.MaxActive("busy")
	maxQuiet, _ := b.route.MaxActive("quiet")
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
	slices.SortFunc(calls, func(a, b Call) int { return a.At.Compare(b.At) })
	for _, c := range calls {
		order[c.Req.AgentID] = append(order[c.Req.AgentID], c.Req.JobID)
		if c.Req.AgentID == "quiet" {
			lastQuiet = c.Finished
		} else {
			lastBusy = c.Finished
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

func testDispatchExtendsSlowDelivery(t *testing.T, e relay.Engine) {
	// The delivery outlasts four leases. A lease is renewed every quarter
	// of it, so only a stall of three quarters of a lease (here 225ms, more
	// than a loaded machine running the race detector stalls) could lapse it.
	slow := Delivered
	slow.Hold = 1200 * time.Millisecond
	// Two dispatchers share the engine: if the lease lapsed, the other one
	// (or the reaper) would hand the fire out a second time.
	b := startDispatch(t, e, always(slow), relay.DispatcherConfig{LeaseFor: 300 * time.Millisecond}, 2)
	armAt(t, e, "a1", "job", time.Now())
	b.route.Wait(t, 1, 5*time.Second)
	drained(t, e)
	b.stop()
	if n := len(b.route.Calls()); n != 1 {
		t.Fatalf("%d calls, want 1: the lease lapsed during the slow delivery", n)
	}
	if got := b.metrics.outcomes[relay.Done].Load(); got != 1 {
		t.Fatalf("done outcomes %d, want 1", got)
	}
}

func testDispatchExtendsWaitingLeases(t *testing.T, e relay.Engine) {
	// One at a time to one agent, each call longer than half a lease: the
	// last fire waits several leases long for its turn, held in the store.
	// Were it leased while it waited, and its lease lapsed, it would be
	// handed out, and delivered, twice.
	// Leases of 300ms are renewed every 75ms: generous enough that a loaded
	// machine does not lapse one by stalling the renewal.
	slow := Delivered
	slow.Hold = 160 * time.Millisecond
	b := startDispatch(t, e, always(slow), relay.DispatcherConfig{PerAgent: 1, LeaseFor: 300 * time.Millisecond}, 2)
	at := time.Now()
	for i := range 8 {
		armAt(t, e, "a1", fmt.Sprintf("j%d", i), at)
	}
	b.route.Wait(t, 8, 10*time.Second)
	drained(t, e)
	b.stop()
	perID := b.route.PerID()
	for id, n := range perID {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	// PerAgent bounds the agent's deliveries in the store: two dispatchers
	// together call it once at a time, never more.
	if most, _ := b.route.MaxActive("a1"); len(perID) != 8 || most > 1 {
		t.Fatalf("%d fires delivered, %d at once; want 8, one at a time over both dispatchers", len(perID), most)
	}
}

func testDispatchShutdownDrains(t *testing.T, e relay.Engine) {
	gate := make(chan struct{})
	gated := Delivered
	gated.Gate = gate
	b := startDispatch(t, e, always(gated), relay.DispatcherConfig{}, 1)
	armAt(t, e, "a1", "job", time.Now())
	inFlight(t, b.route, 1)
	stopped := make(chan struct{})
	go func() {
		b.stop()
		close(stopped)
	}()
	// Run must wait for the delivery in flight; let it finish only now.
	gate <- struct{}{}
	<-stopped
	equal(t, stats(t, e), relay.Stats{}, "stats after the drain (the fire acked)")
	calls := b.route.Calls()
	if len(calls) != 1 || calls[0].CtxErr != nil {
		t.Fatalf("the delivery was cut short: %+v", calls)
	}
}

func testDispatchDrainTimeoutReturnsFire(t *testing.T, e relay.Engine) {
	hung := Delivered
	hung.Gate = make(chan struct{}) // never opened: the call hangs until cancelled
	b := startDispatch(t, e, always(hung), relay.DispatcherConfig{DrainTimeout: 50 * time.Millisecond}, 1)
	armAt(t, e, "a1", "job", time.Now())
	inFlight(t, b.route, 1)
	b.stop()
	got, err := e.Get(ctxT(t), "a1", "job")
	noErr(t, err, "get")
	if got.State != relay.StateArmed || got.LastError == "" {
		t.Fatalf("after a cut-short delivery the fire is %+v, want armed again with a reason", got)
	}
}

func testDispatchHeldFiresWaitInStore(t *testing.T, e relay.Engine) {
	// Fires beyond the agent's parallelism are held in the store, not
	// leased by the dispatcher: stopping it leaves them armed, and a new
	// dispatcher delivers them.
	gate := make(chan struct{})
	gated := Delivered
	gated.Gate = gate
	b := startDispatch(t, e, always(gated), relay.DispatcherConfig{PerAgent: 1}, 1)
	at := time.Now()
	for i := range 3 {
		armAt(t, e, "a1", fmt.Sprintf("j%d", i), at)
	}
	eventually(t, 5*time.Second, "one delivery in flight, two held in the store", func() bool {
		s, err := e.Stats(ctxT(t))
		return err == nil && s.Leased == 1 && s.Held == 2 && b.route.InFlight() == 1
	})
	// The dispatcher stops claiming before the delivery in flight ends (it
	// then only finishes that one), so the room the ack frees takes none
	// of the held fires.
	b.cancel()
	stopped := make(chan struct{})
	go func() {
		b.stop()
		close(stopped)
	}()
	gate <- struct{}{}
	<-stopped
	if n := len(b.route.Calls()); n != 1 {
		t.Fatalf("%d calls, want only the one in flight", n)
	}
	s := stats(t, e)
	if s.Armed != 2 || s.Leased != 0 || s.Held+s.Due != 2 {
		t.Fatalf("stats after shutdown %+v: want the two other fires armed, held or due, none leased", s)
	}
	next := startDispatch(t, e, always(Delivered), relay.DispatcherConfig{PerAgent: 1}, 1)
	next.route.Wait(t, 2, 10*time.Second)
	drained(t, e)
	next.stop()
}

func testDispatchCancelsDeliveryWhenLeaseLost(t *testing.T, e relay.Engine) {
	hung := Delivered
	hung.Gate = make(chan struct{}) // only the lease's loss ends this call
	b := startDispatch(t, e, always(hung), relay.DispatcherConfig{LeaseFor: 100 * time.Millisecond}, 1)
	armAt(t, e, "a1", "job", time.Now())
	inFlight(t, b.route, 1)
	ok, err := e.Cancel(ctxT(t), "a1", "job")
	noErr(t, err, "cancel")
	equal(t, ok, true, "cancelled")
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	b.stop()
	if c.CtxErr == nil {
		t.Fatalf("the call for %s was not cancelled when its lease was lost", c.Req.JobID)
	}
	equal(t, stats(t, e), relay.Stats{}, "stats (nothing left)")
}

// failingClaims is a Queue whose next claim that takes leases also reports
// an error, as a claim that failed part way does.
type failingClaims struct {
	relay.Queue
	armed atomic.Bool
}

func (q *failingClaims) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	ls, err := q.Queue.Claim(ctx, max, leaseFor, flow)
	if err == nil && len(ls) > 0 && q.armed.CompareAndSwap(true, false) {
		err = errors.New("claim failed part way")
	}
	return ls, err
}

func testDispatchKeepsLeasesOfAFailedClaim(t *testing.T, e relay.Engine) {
	q := &failingClaims{Queue: e}
	q.armed.Store(true)
	// A lease of a minute: a dropped lease would come back only after it.
	b := startDispatchers(t, e, dispatchOptions{queue: q, answer: always(Delivered), cfg: relay.DispatcherConfig{LeaseFor: time.Minute}})
	armAt(t, e, "a1", "job", time.Now())
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	drained(t, e)
	b.stop()
	if q.armed.Load() {
		t.Fatal("the failing claim never happened")
	}
	equal(t, c.Req.Attempt, 1, "attempt of the delivery")
}

// brokenClaims is a Queue whose first fail claims fail with nothing taken,
// as a store that is down does; it records when each claim came.
type brokenClaims struct {
	relay.Queue
	fail int

	mu sync.Mutex
	at []time.Time
}

func (q *brokenClaims) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	q.mu.Lock()
	q.at = append(q.at, time.Now())
	n := len(q.at)
	q.mu.Unlock()
	if n <= q.fail {
		return nil, errors.New("store down")
	}
	return q.Queue.Claim(ctx, max, leaseFor, flow)
}

// testDispatchBacksOffAfterStoreErrors: claims that fail are repeated on
// the dispatcher's store-error schedule (50ms doubling), not in a tight
// loop, and the fire due meanwhile is delivered, on its first attempt, once
// the store answers again.
func testDispatchBacksOffAfterStoreErrors(t *testing.T, e relay.Engine) {
	q := &brokenClaims{Queue: e, fail: 4}
	armAt(t, e, "a1", "job", time.Now())
	b := startDispatchers(t, e, dispatchOptions{queue: q, answer: always(Delivered)})
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	drained(t, e)
	b.stop()
	equal(t, c.Req.Attempt, 1, "attempt of the delivery")
	q.mu.Lock()
	at := slices.Clone(q.at)
	q.mu.Unlock()
	if len(at) < 5 {
		t.Fatalf("%d claims, want the 4 that failed and one that took the fire", len(at))
	}
	for i, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < want {
			t.Errorf("claim %d came %s after failed claim %d, want at least %s", i+2, gap, i+1, want)
		}
	}
}

func testDispatchRunTwice(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	block := make(chan struct{})
	d := relay.NewDispatcher(e, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		<-block
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Logger: quiet})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- d.Run(runCtx) }()
	armAt(t, e, "a", "j", time.Now())
	eventually(t, 5*time.Second, "claim", func() bool {
		s, err := e.Stats(ctx)
		return err == nil && s.Leased == 1
	})
	isErr(t, d.Run(runCtx), relay.ErrDispatcherRunning, "second Run")
	cancel()
	close(block)
	noErr(t, <-done, "run")
	bad := relay.NewDispatcher(e, relay.DelivererFunc(nil), relay.DispatcherConfig{Batch: -1})
	if err := bad.Run(ctx); err == nil || !strings.Contains(err.Error(), "Batch") {
		t.Fatalf("run with a bad config = %v", err)
	}
}

func testDispatchSurvivesPanickingDeliverer(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	var calls atomic.Int64
	d := relay.NewDispatcher(e, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Logger: quiet, Retry: relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	armAt(t, e, "a", "j", time.Now())
	drained(t, e)
	cancel()
	noErr(t, <-done, "run")
	equal(t, calls.Load(), 2, "deliveries")
}

// watched is an engine that tells when a dispatcher has asked for the next
// due time: it then holds its wake-up channel and is about to wait, so what
// happens next reaches it only through Wake.
type watched struct {
	relay.Engine
	waiting chan struct{}
}

func (w *watched) NextDue(ctx context.Context) (time.Duration, bool, error) {
	d, ok, err := w.Engine.NextDue(ctx)
	select {
	case w.waiting <- struct{}{}:
	default:
	}
	return d, ok, err
}

// waitingDispatcher starts one dispatcher on e that rechecks only hourly,
// and returns once it waits with nothing due.
func waitingDispatcher(t *testing.T, e relay.Engine, answer AnswerFunc) *dispatch {
	t.Helper()
	w := &watched{Engine: e, waiting: make(chan struct{}, 1)}
	b := startDispatchers(t, e, dispatchOptions{queue: w, answer: answer, cfg: relay.DispatcherConfig{Recheck: time.Hour}})
	select {
	case <-w.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the dispatcher never waited")
	}
	return b
}

// testPeerNackWakesDispatcher: another process nacks a fire to be due soon;
// this process's dispatcher, waiting with nothing due, must deliver it at
// that time, not at its next recheck.
func testPeerNackWakesDispatcher(t *testing.T, e, peer relay.Engine) {
	ctx := ctxT(t)
	armAt(t, peer, "a1", "job", time.Now().Add(-time.Second))
	l := claimOne(t, peer, time.Minute)
	b := waitingDispatcher(t, e, always(Delivered))
	const delay = 500 * time.Millisecond
	nacked := time.Now()
	noErr(t, peer.Nack(ctx, l, delay, "agent answered 500"), "nack")
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	if late := c.At.Sub(nacked); late < delay || late > delay+delay/5 {
		t.Fatalf("the retry came %s after the nack, want %s ± 20%%", late, delay)
	}
	equal(t, c.Req.Attempt, 2, "attempt of the retry")
	drained(t, e)
}

// testPeerReplayWakesDispatcher: another process replays a dead letter; this
// process's waiting dispatcher delivers it at once.
func testPeerReplayWakesDispatcher(t *testing.T, e, peer relay.Engine) {
	ctx := ctxT(t)
	s := armAt(t, peer, "a1", "job", time.Now().Add(-time.Second))
	noErr(t, peer.Kill(ctx, claimOne(t, peer, time.Minute), "gave up"), "kill")
	b := waitingDispatcher(t, e, always(Delivered))
	replayed := time.Now()
	rp, err := peer.Replay(ctx, []string{s.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	if late := c.At.Sub(replayed); late > 200*time.Millisecond {
		t.Fatalf("the replayed fire came %s after the replay, want at once", late)
	}
	drained(t, e)
}

// testDispatchRecordsDeadLetteredFireAsLastFire: a fire the dispatcher
// dead-letters, whether the agent refused it or the retries ran out, becomes
// its job's last fire, so NAS can tell the agent why the slot never ran and
// report the job as unarmed until it is armed again.
func testDispatchRecordsDeadLetteredFireAsLastFire(t *testing.T, e relay.Engine) {
	for _, tc := range []struct {
		name   string
		answer Reply
		retry  relay.RetryPolicy
		reason string
	}{
		{"rejected", Reply{Status: http.StatusOK, Body: `{"status":"rejected","reason":"agent answered 404"}`}, relay.RetryPolicy{}, "agent answered 404"},
		{"retries spent", failing,
			relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxAttempts: 2, NoColdStart: true}, "gave up after 2 attempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent := "a-" + strings.ReplaceAll(tc.name, " ", "-")
			b := startDispatch(t, e, always(tc.answer), relay.DispatcherConfig{Retry: tc.retry}, 1)
			s := armAt(t, e, agent, "job", time.Now())
			var got []relay.UnarmedFire
			eventually(t, 5*time.Second, "the dead-lettered fire as the job's last fire", func() bool {
				all, _, err := e.Unarmed(ctxT(t), relay.UnarmedQuery{Before: time.Now()})
				got = got[:0]
				for _, f := range all {
					if f.AgentID == agent {
						got = append(got, f)
					}
				}
				return err == nil && len(got) == 1
			})
			b.stop()
			f := got[0]
			if f.JobID != "job" || f.ScheduleID != s.ScheduleID || !f.FireAt.Equal(s.FireAt) ||
				f.InstanceID != "i-"+agent || f.Outcome != relay.LastFireDeadLettered || !strings.Contains(f.Reason, tc.reason) {
				t.Fatalf("last fire %+v, want the dead-lettered fire of %s with reason %q", f, s.ScheduleID, tc.reason)
			}
		})
	}
}

// testDispatchWritesRecordWithAck: a Done outcome carrying its fire's
// last-fire record (as an in-process deliverer hands it over) gets it
// written with the ack: the one-shot is gone and the record is the job's
// last fire. Many fires at once exercise the batched acks.
func testDispatchWritesRecordWithAck(t *testing.T, e relay.Engine) {
	const n = 40
	agents := []string{"rec-a", "rec-b", "rec-c"}
	deliverer := relay.DelivererFunc(func(_ context.Context, l relay.Lease) relay.Outcome {
		return relay.Outcome{Kind: relay.Done, Reason: "delivered", Record: &relay.LastFire{
			AgentID: l.AgentID, InstanceID: l.InstanceID, JobID: l.JobID, ScheduleID: l.ScheduleID,
			FireAt: l.FireAt, CallbackURL: l.CallbackURL, Outcome: relay.LastFireDelivered, Reason: "agent answered 202", At: time.Now(),
		}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	disp := relay.NewDispatcher(e, deliverer, relay.DispatcherConfig{Logger: quiet})
	var wg sync.WaitGroup
	wg.Go(func() { _ = disp.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	want := map[string]string{} // agent/job → schedule id
	for i := range n {
		agent, job := agents[i%len(agents)], fmt.Sprintf("job-%d", i)
		want[agent+"/"+job] = armAt(t, e, agent, job, time.Now()).ScheduleID
	}
	drained(t, e)
	got := 0
	for _, agent := range agents {
		fires, err := e.LastFiresOf(ctxT(t), agent, time.Time{})
		noErr(t, err, "last fires of "+agent)
		for _, f := range fires {
			sid, ok := want[agent+"/"+f.JobID]
			if !ok || f.ScheduleID != sid || f.Outcome != relay.LastFireDelivered || f.Reason != "agent answered 202" || f.InstanceID != "i-"+agent {
				t.Fatalf("last fire %+v is not the delivered fire's record (schedule id %s)", f, sid)
			}
			got++
		}
	}
	equal(t, got, n, "last fire records")
}
