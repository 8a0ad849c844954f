package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/postgres"
)

// testCtx returns a context that ends with the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// armNow arms n jobs of each agent, due a second ago.
func armNow(t *testing.T, e relay.Engine, agents []string, n int) {
	t.Helper()
	at := time.Now().Add(-time.Second)
	for i := range n {
		for _, a := range agents {
			_, err := e.Arm(testCtx(t), relay.ArmRequest{AgentID: a, InstanceID: "i-" + a, JobID: fmt.Sprintf("j%03d", i),
				FireAt: at, CallbackURL: "https://" + a + ".example/cb", ScheduleID: fmt.Sprintf("%s-%s-%d", t.Name(), a, i)})
			if err != nil {
				t.Fatalf("arm %s/%d: %v", a, i, err)
			}
		}
	}
}

// TestPeersNeverLeaseOneFireTwice: claimers on two engines of one schema,
// as two processes, lease every fire once and together keep each agent's
// parallelism.
func TestPeersNeverLeaseOneFireTwice(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	peer := newEngine(t, postgres.Options{Schema: e.Schema()})
	agents := []string{"a1", "a2", "a3", "a4", "a5"}
	const perAgent, par = 60, 3
	armNow(t, e, agents, perAgent)

	var mu sync.Mutex
	claimed := map[string]int{}
	inFlight := map[string]int{}
	most := 0
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	ctx := testCtx(t)
	for _, eng := range []*postgres.Engine{e, peer} {
		for range 4 {
			wg.Go(func() {
				idle := 0
				for idle < 20 {
					ls, err := eng.Claim(ctx, 8, time.Minute, relay.Flow{Parallelism: par})
					if err != nil {
						errs <- err
						return
					}
					if len(ls) == 0 {
						idle++
						time.Sleep(5 * time.Millisecond)
						continue
					}
					idle = 0
					mu.Lock()
					for _, l := range ls {
						claimed[l.ScheduleID]++
						inFlight[l.AgentID]++
						most = max(most, inFlight[l.AgentID])
					}
					mu.Unlock()
					time.Sleep(2 * time.Millisecond) // the delivery
					for _, l := range ls {
						// Counted out before the ack commits: the store
						// counts a lease at least as long as this map does.
						mu.Lock()
						inFlight[l.AgentID]--
						mu.Unlock()
						if err := eng.Ack(ctx, l); err != nil {
							errs <- err
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("claim or ack: %v", err)
	}
	if len(claimed) != len(agents)*perAgent {
		t.Fatalf("%d fires claimed, want %d", len(claimed), len(agents)*perAgent)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Fatalf("fire %s claimed %d times", id, n)
		}
	}
	if most > par {
		t.Fatalf("an agent had %d leases at once, over its parallelism %d", most, par)
	}
	st, err := peer.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st != (relay.Stats{}) {
		t.Fatalf("stats after every ack: %+v, want none left", st)
	}
}

// TestHeldFiresSurviveANewEngine: fires held back by flow control are rows
// of the store: an engine opened on the schema later, as a restarted
// process, knows them and hands them out in due order as room frees.
func TestHeldFiresSurviveANewEngine(t *testing.T) {
	t.Parallel()
	first := newEngine(t, postgres.Options{})
	armNow(t, first, []string{"a1"}, 5)
	flow := relay.Flow{Parallelism: 2}
	ls, err := first.Claim(testCtx(t), 10, time.Minute, flow)
	if err != nil || len(ls) != 2 {
		t.Fatalf("claim: %d leases, %v; want 2", len(ls), err)
	}
	schema := first.Schema()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	next := newEngine(t, postgres.Options{Schema: schema})
	ctx := testCtx(t)
	f, err := next.AgentFlow(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if f.Held != 3 || f.InFlight != 2 {
		t.Fatalf("flow after a restart %+v: want 3 held, 2 in flight", f)
	}
	// The old process's leases are acked through the new engine.
	for _, l := range ls {
		if err := next.Ack(ctx, l); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if wait, ok, err := next.NextDue(ctx); err != nil || !ok || wait != 0 {
		t.Fatalf("next due with held fires and room: %s, %v, %v; want due now", wait, ok, err)
	}
	var jobs []string
	for range 5 {
		got, err := next.Claim(ctx, 10, time.Minute, flow)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 2 {
			t.Fatalf("%d leases at once, over the parallelism", len(got))
		}
		for _, l := range got {
			jobs = append(jobs, l.JobID)
			if err := next.Ack(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fmt.Sprint(jobs) != "[j002 j003 j004]" {
		t.Fatalf("held fires leased %v, want j002 j003 j004 in due order", jobs)
	}
	if _, ok, err := next.NextDue(ctx); err != nil || ok {
		t.Fatalf("next due with nothing left: %v, %v", ok, err)
	}
}

// TestLostLeaseErrors: every fenced call with a stale token fails with
// relay.ErrLeaseLost; an AckRecord writes its record all the same.
func TestLostLeaseErrors(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	ctx := testCtx(t)
	armNow(t, e, []string{"a1"}, 1)
	ls, err := e.Claim(ctx, 1, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %d, %v", len(ls), err)
	}
	l := ls[0]
	stale := l
	stale.Token++
	for name, err := range map[string]error{
		"ack":  e.Ack(ctx, stale),
		"nack": e.Nack(ctx, stale, 0, "x"),
		"down": e.Down(ctx, stale, 0, 0, "x"),
		"kill": e.Kill(ctx, stale, "x"),
		"ackrec": e.AckRecord(ctx, stale, relay.LastFire{AgentID: "a1", JobID: l.JobID, ScheduleID: l.ScheduleID,
			FireAt: l.FireAt, Outcome: relay.LastFireDelivered, At: time.Now()}),
	} {
		if !errors.Is(err, relay.ErrLeaseLost) {
			t.Errorf("%s with a stale token: %v, want ErrLeaseLost", name, err)
		}
	}
	// The record of a lost lease is written all the same.
	fires, err := e.LastFiresOf(ctx, "a1", time.Time{})
	if err != nil || len(fires) != 1 || fires[0].ScheduleID != l.ScheduleID {
		t.Fatalf("last fires after an ack of a lost lease: %+v, %v", fires, err)
	}
	if err := e.Ack(ctx, l); err != nil {
		t.Fatalf("ack with the current token: %v", err)
	}
}

// TestAcksGroupCommit: many acks at once, with records, all land.
func TestAcksGroupCommit(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	ctx := testCtx(t)
	armNow(t, e, []string{"a1", "a2", "a3"}, 100)
	var all []relay.Lease
	for {
		ls, err := e.Claim(ctx, 64, time.Minute, relay.Flow{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			break
		}
		all = append(all, ls...)
	}
	if len(all) != 300 {
		t.Fatalf("%d leases, want 300", len(all))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(all))
	for i, l := range all {
		wg.Go(func() {
			if i%2 == 0 {
				errs <- e.Ack(ctx, l)
				return
			}
			errs <- e.AckRecord(ctx, l, relay.LastFire{AgentID: l.AgentID, InstanceID: l.InstanceID, JobID: l.JobID,
				ScheduleID: l.ScheduleID, FireAt: l.FireAt, Outcome: relay.LastFireDelivered, At: time.Now()})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	st, err := e.Stats(ctx)
	if err != nil || st != (relay.Stats{}) {
		t.Fatalf("stats after the acks: %+v, %v", st, err)
	}
	n := 0
	for _, a := range []string{"a1", "a2", "a3"} {
		fires, err := e.LastFiresOf(ctx, a, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		n += len(fires)
	}
	if n != 150 {
		t.Fatalf("%d last fires recorded, want 150", n)
	}
}

// TestConcurrentArmsUnderQuota: arms of an agent at once keep its quota
// exactly (they take turns under its tie row); other agents' arms stand.
func TestConcurrentArmsUnderQuota(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	ctx := testCtx(t)
	at := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, over := map[string]int{}, 0
	for i := range 60 {
		agent := fmt.Sprintf("a%d", i%3)
		wg.Go(func() {
			req := relay.ArmRequest{AgentID: agent, JobID: fmt.Sprintf("j%02d", i), FireAt: at,
				ScheduleID: fmt.Sprintf("%s-%d", t.Name(), i)}
			if agent == "a0" {
				req.MaxArmed = 5
			}
			res, err := e.Arm(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, relay.ErrQuotaExceeded):
				over++
			case err != nil:
				t.Errorf("arm %s/%s: %v", agent, req.JobID, err)
			case !res.Changed || res.OneShot.ScheduleID != req.ScheduleID:
				t.Errorf("arm %s/%s: %+v", agent, req.JobID, res)
			default:
				ok[agent]++
			}
		})
	}
	wg.Wait()
	if ok["a0"] != 5 || over != 15 || ok["a1"] != 20 || ok["a2"] != 20 {
		t.Fatalf("armed %v, %d over quota; want a0 5 (15 over its quota of 5), a1 20, a2 20", ok, over)
	}
	st, err := e.Stats(ctx)
	if err != nil || st.Armed != 45 {
		t.Fatalf("stats %+v, %v; want 45 armed", st, err)
	}
}
