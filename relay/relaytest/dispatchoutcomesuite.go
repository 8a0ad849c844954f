package relaytest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

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
