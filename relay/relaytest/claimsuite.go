package relaytest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

func testClaimNotBeforeFireAt(t *testing.T, e relay.Engine) {
	// A fire_at with a sub-millisecond fraction: an engine that rounds down
	// (or keeps whole seconds) would hand it out early.
	fireAt := time.Now().Add(time.Second + 500*time.Microsecond)
	res := arm(t, e, "a1", "job", fireAt)
	equal(t, len(claim(t, e, 10, time.Minute)), 0, "claims before fire_at")
	l, at := claimEventually(t, e, time.Minute, 5*time.Second)
	if at.Before(fireAt) {
		t.Fatalf("claimed at %s, before fire_at %s", at.Format(time.RFC3339Nano), fireAt.Format(time.RFC3339Nano))
	}
	// Never early is exact; the upper bound only separates a due entry
	// from one held back (the lag is measured by benchmarks).
	if late := at.Sub(fireAt); late > time.Second {
		t.Errorf("claimed %s after fire_at, want it as soon as it is due", late)
	}
	equal(t, l.ScheduleID, res.OneShot.ScheduleID, "claimed schedule id")
	equal(t, l.Attempt, 1, "attempt of the first claim")
	equal(t, l.State, relay.StateLeased, "state of the claim")
}

func testClaimOnce(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	if l.Token == 0 {
		t.Fatal("claim returned token 0")
	}
	equal(t, len(claim(t, e, 10, time.Minute)), 0, "second claim")
	s := stats(t, e)
	equal(t, s.Leased, 1, "leased")
	equal(t, s.Due, 0, "due")
	got, err := e.Get(ctxT(t), "a1", "job")
	noErr(t, err, "get")
	equal(t, got.State, relay.StateLeased, "state")
	equal(t, got.Attempt, 1, "attempt")
}

// testClaimCarriesDelivery: a claimed lease carries what a delivery needs
// (the row, its attempt, when it was claimed and whether its instance is
// stopped), so an in-process delivery reads nothing more.
func testClaimCarriesDelivery(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	past := now().Add(-time.Second)
	running := arm(t, e, "a1", "job", past).OneShot
	stopped := arm(t, e, "a2", "job", past).OneShot
	noErr(t, e.SetInstanceState(ctx, stopped.InstanceID, relay.InstanceStopped), "stop")
	before := time.Now()
	ls := claim(t, e, 10, time.Minute)
	equal(t, len(ls), 2, "leases")
	for _, l := range ls {
		want := running
		if l.AgentID == "a2" {
			want = stopped
		}
		equal(t, l.ScheduleID, want.ScheduleID, "schedule id")
		equal(t, l.InstanceID, want.InstanceID, "instance id")
		equal(t, l.CallbackURL, want.CallbackURL, "callback")
		equal(t, l.Attempt, 1, "attempt")
		sameTime(t, l.FireAt, want.FireAt, "fire_at")
		equal(t, l.InstanceStopped, l.AgentID == "a2", "instance stopped of "+l.AgentID)
		if l.ClaimedAt.Before(before) || l.ClaimedAt.After(time.Now()) {
			t.Fatalf("ClaimedAt %v is not the time of the claim (after %v)", l.ClaimedAt, before)
		}
		ext, err := e.Extend(ctx, l, time.Minute)
		noErr(t, err, "extend")
		if !ext.ClaimedAt.IsZero() {
			t.Fatalf("an extended lease has ClaimedAt %v, want zero", ext.ClaimedAt)
		}
		noErr(t, e.Nack(ctx, ext, 0, "again"), "nack")
	}
	// Started again: the next claim says so.
	noErr(t, e.SetInstanceState(ctx, stopped.InstanceID, relay.InstanceRunning), "start")
	for _, l := range claimAll(t, e, 2) {
		equal(t, l.InstanceStopped, false, "instance stopped after a start, "+l.AgentID)
		equal(t, l.Attempt, 2, "attempt")
	}
}

// claimAll claims until n leases are taken (a nack's due time is judged by
// the engine's clock, a moment away).
func claimAll(t *testing.T, e relay.Engine, n int) []relay.Lease {
	t.Helper()
	var out []relay.Lease
	eventually(t, 5*time.Second, "claim", func() bool {
		out = append(out, claim(t, e, n-len(out), time.Minute)...)
		return len(out) == n
	})
	return out
}

func testClaimBatch(t *testing.T, e relay.Engine) {
	base := now().Add(-time.Minute)
	var want []string
	for i := range 5 {
		want = append(want, arm(t, e, "a1", fmt.Sprintf("j%d", 4-i), base.Add(time.Duration(i)*time.Second)).OneShot.ScheduleID)
	}
	arm(t, e, "a1", "future", now().Add(time.Hour))
	first := claim(t, e, 3, time.Minute)
	rest := claim(t, e, 10, time.Minute)
	equal(t, len(first), 3, "first batch")
	equal(t, len(rest), 2, "second batch")
	var got []string
	for _, l := range append(first, rest...) {
		got = append(got, l.ScheduleID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("claim order %v, want due order %v", got, want)
	}
	equal(t, len(claim(t, e, 10, time.Minute)), 0, "third batch")
	equal(t, len(claim(t, e, 0, time.Minute)), 0, "claim of max 0")
}

func testFencing(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	old := claimOne(t, e, 100*time.Millisecond)
	eventually(t, 5*time.Second, "reap of the expired lease", func() bool {
		n, err := e.Reap(ctxT(t))
		noErr(t, err, "reap")
		return n == 1
	})
	cur := claimOne(t, e, time.Minute)
	equal(t, cur.Attempt, 2, "attempt of the second claim")
	if cur.Token == old.Token {
		t.Fatalf("second claim reused token %d", cur.Token)
	}
	lost(t, e, old)
	ext, err := e.Extend(ctxT(t), cur, time.Minute)
	noErr(t, err, "extend with the current token")
	equal(t, ext.Token, cur.Token, "token after extend")
	noErr(t, e.Ack(ctxT(t), cur), "ack with the current token")
}

func testExtend(t *testing.T, e relay.Engine) {
	at := now().Add(-time.Second)
	arm(t, e, "a1", "short", at)
	arm(t, e, "a1", "long", at.Add(time.Millisecond))
	ls := claim(t, e, 2, 200*time.Millisecond)
	equal(t, len(ls), 2, "claims")
	long := ls[1]
	equal(t, long.JobID, "long", "second claim")
	ext, err := e.Extend(ctxT(t), long, time.Minute)
	noErr(t, err, "extend")
	if !ext.Until.After(long.Until) {
		t.Fatalf("extended until %s, not after %s", ext.Until, long.Until)
	}
	equal(t, ext.ScheduleID, long.ScheduleID, "extended schedule id")
	// The unextended lease expires; the extended one must outlive it.
	eventually(t, 5*time.Second, "reap of the unextended lease", func() bool {
		n, err := e.Reap(ctxT(t))
		noErr(t, err, "reap")
		if n > 1 {
			t.Fatalf("reaped %d leases, want only the unextended one", n)
		}
		return n == 1
	})
	got, err := e.Get(ctxT(t), "a1", "long")
	noErr(t, err, "get extended")
	equal(t, got.State, relay.StateLeased, "extended state")
	n, err := e.Reap(ctxT(t))
	noErr(t, err, "reap again")
	equal(t, n, 0, "second reap")
	noErr(t, e.Ack(ctxT(t), ext), "ack of the extended lease")
}

func testAckRemoves(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	noErr(t, e.Ack(ctxT(t), l), "ack")
	_, err := e.Get(ctxT(t), "a1", "job")
	isErr(t, err, relay.ErrNotFound, "get after ack")
	lost(t, e, l)
	equal(t, stats(t, e), relay.Stats{}, "stats after ack")
	jobs, _ := listAll(t, e, "a1", 10)
	equal(t, len(jobs), 0, "listed after ack")
}

func testNackRedue(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	const delay = 150 * time.Millisecond
	before := time.Now()
	noErr(t, e.Nack(ctxT(t), l, delay, "agent said 503"), "nack")
	got, err := e.Get(ctxT(t), "a1", "job")
	noErr(t, err, "get")
	equal(t, got.State, relay.StateArmed, "state after nack")
	equal(t, got.LastError, "agent said 503", "last error")
	equal(t, got.Attempt, 1, "attempt after nack")
	if got.DueAt.Before(before.Add(delay).Add(-time.Millisecond)) {
		t.Fatalf("due at %s, want about %s later than %s", got.DueAt, delay, before)
	}
	lost(t, e, l)
	wait, ok, err := e.NextDue(ctxT(t))
	noErr(t, err, "next due")
	equal(t, ok, true, "next due ok")
	if wait <= 0 || wait > delay+time.Millisecond { // due times may round up to the millisecond
		t.Fatalf("next due in %s, want in (0, %s]", wait, delay+time.Millisecond)
	}
	again, at := claimEventually(t, e, time.Minute, 5*time.Second)
	if at.Sub(before) < delay {
		t.Fatalf("claimed %s after the nack, want at least %s", at.Sub(before), delay)
	}
	equal(t, again.Attempt, 2, "attempt of the retry")
	equal(t, again.LastError, "agent said 503", "last error of the retry")
}

func testReap(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	arm(t, e, "a1", "job", now().Add(-time.Second))
	arm(t, e, "a1", "kept", now().Add(-time.Second))
	ls := claim(t, e, 10, 100*time.Millisecond)
	equal(t, len(ls), 2, "claims")
	kept := ls[1]
	if ls[0].JobID == "kept" {
		kept = ls[0]
	}
	_, err := e.Extend(ctx, kept, time.Minute)
	noErr(t, err, "extend")
	n, err := e.Reap(ctx)
	noErr(t, err, "reap of live leases")
	equal(t, n, 0, "reaped before expiry")
	eventually(t, 5*time.Second, "reap", func() bool {
		n, err := e.Reap(ctx)
		noErr(t, err, "reap")
		return n == 1
	})
	got, err := e.Get(ctx, "a1", "job")
	noErr(t, err, "get reaped")
	equal(t, got.State, relay.StateArmed, "reaped state")
	equal(t, got.Attempt, 1, "reaped attempt")
	wait, ok, err := e.NextDue(ctx)
	noErr(t, err, "next due")
	equal(t, ok, true, "next due ok")
	equal(t, wait, 0, "reaped one-shot is due now")
	again := claimOne(t, e, time.Minute)
	equal(t, again.JobID, "job", "claim after reap")
	equal(t, again.Attempt, 2, "attempt after reap")
}

func testNextDue(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	_, ok, err := e.NextDue(ctx)
	noErr(t, err, "next due of empty")
	equal(t, ok, false, "next due of empty ok")
	arm(t, e, "a1", "later", now().Add(time.Hour))
	wait, ok, err := e.NextDue(ctx)
	noErr(t, err, "next due")
	equal(t, ok, true, "next due ok")
	if wait < time.Hour-time.Minute || wait > time.Hour {
		t.Fatalf("next due in %s, want about an hour", wait)
	}
	arm(t, e, "a1", "past", now().Add(-time.Second))
	wait, _, err = e.NextDue(ctx)
	noErr(t, err, "next due")
	equal(t, wait, 0, "next due with a past fire")
	claimOne(t, e, time.Minute)
	wait, _, err = e.NextDue(ctx)
	noErr(t, err, "next due after the claim")
	if wait < time.Hour-time.Minute {
		t.Fatalf("next due counts a leased entry: %s", wait)
	}
}

func testStats(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	equal(t, stats(t, e), relay.Stats{}, "stats of an empty engine")
	for _, j := range []string{"f1", "f2", "f3"} {
		arm(t, e, "a1", j, now().Add(time.Hour))
	}
	arm(t, e, "a1", "d1", now().Add(-2*time.Second))
	arm(t, e, "a1", "d2", now().Add(-time.Second))
	ls := claim(t, e, 1, time.Minute) // the other due one stays due
	equal(t, len(ls), 1, "claims")
	l := ls[0]
	equal(t, stats(t, e), relay.Stats{Armed: 5, Due: 1, Leased: 1}, "stats after a claim")
	noErr(t, e.Kill(ctx, l, "gave up"), "kill")
	equal(t, stats(t, e), relay.Stats{Armed: 4, Due: 1, DeadLetter: 1}, "stats after a kill")
}

func testConcurrentClaims(t *testing.T, e relay.Engine) {
	const n, workers = 300, 8
	at := now().Add(-time.Second)
	for i := range n {
		arm(t, e, fmt.Sprintf("a%d", i%7), fmt.Sprintf("j%d", i), at)
	}
	var mu sync.Mutex
	claimed := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	ctx := ctxT(t)
	for range workers {
		wg.Go(func() {
			for {
				ls, err := e.Claim(ctx, 7, time.Minute, relay.Flow{})
				if err != nil {
					errs <- err
					return
				}
				if len(ls) == 0 {
					return
				}
				for _, l := range ls {
					mu.Lock()
					claimed[l.ScheduleID]++
					mu.Unlock()
					if err := e.Ack(ctx, l); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent claim or ack: %v", err)
	}
	equal(t, len(claimed), n, "one-shots claimed")
	for id, c := range claimed {
		equal(t, c, 1, "claims of "+id)
	}
	equal(t, stats(t, e), relay.Stats{}, "stats after all acks")
}
