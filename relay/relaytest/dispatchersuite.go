package relaytest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
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
