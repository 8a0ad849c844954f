package relaytest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

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
