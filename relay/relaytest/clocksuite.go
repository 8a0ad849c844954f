package relaytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// clockEpoch is where every fake clock starts.
var clockEpoch = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// clockTests run on a Clock stepped by hand.
var clockTests = []struct {
	name string
	run  func(t *testing.T, e relay.Engine, c *Clock)
}{
	{"SubMillisecondFireAt", testClockSubMillisecond},
	{"DueAtItsMillisecond", testClockDueAtItsMillisecond},
	{"NextDue", testClockNextDue},
	{"LeaseExpiry", testClockLeaseExpiry},
	{"ExtendMovesExpiry", testClockExtend},
	{"NackDelay", testClockNack},
	{"ReapDueNow", testClockReapDueNow},
	{"ReplayDueNow", testClockReplayDueNow},
	{"FirstDeliveryTTL", testClockFirstDelivery},
	{"StatsDue", testClockStatsDue},
	{"TimesFromClock", testClockTimes},
	{"FailedFiresRetention", testClockFailedRetention},
}

// claimCount claims up to 10 with a minute's lease and returns how many.
func claimCount(t *testing.T, e relay.Engine) int {
	t.Helper()
	return len(claim(t, e, 10, time.Minute))
}

func testClockSubMillisecond(t *testing.T, e relay.Engine, c *Clock) {
	fireAt := clockEpoch.Add(time.Second + 400*time.Microsecond)
	arm(t, e, "a1", "job", fireAt)
	for _, step := range []struct {
		at   time.Time
		want int
	}{
		{clockEpoch, 0},
		{fireAt.Add(-400 * time.Microsecond), 0}, // the millisecond it starts in
		{fireAt.Add(-time.Nanosecond), 0},
		{fireAt.Add(time.Millisecond), 1},
	} {
		c.Set(step.at)
		equal(t, claimCount(t, e), step.want, "claims at "+step.at.Format(time.RFC3339Nano))
	}
}

func testClockDueAtItsMillisecond(t *testing.T, e relay.Engine, c *Clock) {
	fireAt := clockEpoch.Add(2 * time.Second)
	arm(t, e, "a1", "job", fireAt)
	c.Set(fireAt.Add(-time.Millisecond))
	equal(t, claimCount(t, e), 0, "claims a millisecond early")
	c.Set(fireAt)
	equal(t, claimCount(t, e), 1, "claims at fire_at")
}

func testClockNextDue(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	fireAt := clockEpoch.Add(5*time.Second + 250*time.Microsecond)
	arm(t, e, "a1", "job", fireAt)
	for _, at := range []time.Time{clockEpoch, clockEpoch.Add(4 * time.Second), fireAt.Add(-time.Microsecond)} {
		c.Set(at)
		wait, ok, err := e.NextDue(ctx)
		noErr(t, err, "next due")
		equal(t, ok, true, "next due ok")
		exact := fireAt.Sub(at)
		if wait < exact || wait > exact+time.Millisecond {
			t.Fatalf("at %s: next due in %s, want in [%s, %s]", at.Format(time.RFC3339Nano), wait, exact, exact+time.Millisecond)
		}
	}
	c.Set(fireAt.Add(time.Second))
	wait, _, err := e.NextDue(ctx)
	noErr(t, err, "next due")
	equal(t, wait, 0, "next due when overdue")
}

func testClockLeaseExpiry(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	arm(t, e, "a1", "job", clockEpoch)
	l := claimOne(t, e, 10*time.Second)
	sameTime(t, l.Until, clockEpoch.Add(10*time.Second), "lease until")
	c.Set(clockEpoch.Add(10*time.Second - time.Millisecond))
	n, err := e.Reap(ctx)
	noErr(t, err, "reap")
	equal(t, n, 0, "reaped before expiry")
	c.Set(clockEpoch.Add(10*time.Second + time.Millisecond))
	n, err = e.Reap(ctx)
	noErr(t, err, "reap")
	equal(t, n, 1, "reaped after expiry")
}

func testClockExtend(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	arm(t, e, "a1", "job", clockEpoch)
	l := claimOne(t, e, 10*time.Second)
	c.Set(clockEpoch.Add(5 * time.Second))
	ext, err := e.Extend(ctx, l, 10*time.Second)
	noErr(t, err, "extend")
	sameTime(t, ext.Until, clockEpoch.Add(15*time.Second), "extended until")
	c.Set(clockEpoch.Add(11 * time.Second))
	n, err := e.Reap(ctx)
	noErr(t, err, "reap")
	equal(t, n, 0, "reaped after the old expiry")
	c.Set(clockEpoch.Add(15*time.Second + time.Millisecond))
	n, err = e.Reap(ctx)
	noErr(t, err, "reap")
	equal(t, n, 1, "reaped after the new expiry")
	lost(t, e, ext)
}

func testClockNack(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	arm(t, e, "a1", "job", clockEpoch)
	l := claimOne(t, e, time.Minute)
	c.Set(clockEpoch.Add(time.Second))
	noErr(t, e.Nack(ctx, l, 3*time.Second, "retry"), "nack")
	got, err := e.Get(ctx, "a1", "job")
	noErr(t, err, "get")
	sameTime(t, got.DueAt, clockEpoch.Add(4*time.Second), "due at")
	wait, _, err := e.NextDue(ctx)
	noErr(t, err, "next due")
	equal(t, wait, 3*time.Second, "next due")
	c.Set(clockEpoch.Add(4*time.Second - time.Millisecond))
	equal(t, claimCount(t, e), 0, "claims before the retry")
	c.Set(clockEpoch.Add(4 * time.Second))
	equal(t, claimCount(t, e), 1, "claims at the retry")
}

func testClockReapDueNow(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	arm(t, e, "a1", "job", clockEpoch)
	claimOne(t, e, time.Second)
	c.Set(clockEpoch.Add(time.Hour))
	n, err := e.Reap(ctx)
	noErr(t, err, "reap")
	equal(t, n, 1, "reaped")
	got, err := e.Get(ctx, "a1", "job")
	noErr(t, err, "get")
	sameTime(t, got.DueAt, clockEpoch.Add(time.Hour), "due at after reap")
	equal(t, claimCount(t, e), 1, "claims right after the reap")
}

func testClockReplayDueNow(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	arm(t, e, "a1", "job", clockEpoch)
	l := claimOne(t, e, time.Minute)
	noErr(t, e.Kill(ctx, l, "gave up"), "kill")
	c.Set(clockEpoch.Add(time.Hour))
	rp, err := e.Replay(ctx, []string{l.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	got, err := e.Get(ctx, "a1", "job")
	noErr(t, err, "get")
	sameTime(t, got.DueAt, clockEpoch.Add(time.Hour), "due at after replay")
	sameTime(t, got.FireAt, clockEpoch, "fire_at after replay")
	equal(t, claimCount(t, e), 1, "claims right after the replay")
}

func testClockFirstDelivery(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	for _, step := range []struct {
		at    time.Duration
		first bool
	}{
		{0, true},
		{time.Minute - time.Millisecond, false},
		{time.Minute + time.Millisecond, true},
		{time.Minute + 2*time.Millisecond, false},
	} {
		c.Set(clockEpoch.Add(step.at))
		got, err := e.FirstDelivery(ctx, "d1", time.Minute)
		noErr(t, err, "first delivery")
		equal(t, got, step.first, "first delivery at +"+step.at.String())
	}
}

func testClockStatsDue(t *testing.T, e relay.Engine, c *Clock) {
	for i := 1; i <= 3; i++ {
		arm(t, e, "a1", "j"+string(rune('0'+i)), clockEpoch.Add(time.Duration(i)*time.Second))
	}
	for _, step := range []struct {
		at  time.Duration
		due int64
	}{{0, 0}, {time.Second, 1}, {2500 * time.Millisecond, 2}, {time.Hour, 3}} {
		c.Set(clockEpoch.Add(step.at))
		equal(t, stats(t, e).Due, step.due, "due at +"+step.at.String())
	}
}

func testClockTimes(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	res := arm(t, e, "a1", "job", clockEpoch.Add(time.Minute))
	sameTime(t, res.OneShot.CreatedAt, clockEpoch, "created at")
	c.Set(clockEpoch.Add(time.Minute))
	l := claimOne(t, e, time.Minute)
	c.Set(clockEpoch.Add(2 * time.Minute))
	noErr(t, e.Kill(ctx, l, "gave up"), "kill")
	items, _, err := e.ListDead(ctx, "", "", 10)
	noErr(t, err, "list dead")
	equal(t, len(items), 1, "dead letters")
	sameTime(t, items[0].FailedAt, clockEpoch.Add(2*time.Minute), "failed at")
}

// testClockFailedRetention: failed fires are listed oldest first while they
// are no older than the retention by the engine's clock, then forgotten (an
// ack no longer counts them); the dead letter keeps them.
func testClockFailedRetention(t *testing.T, e relay.Engine, c *Clock) {
	ctx := ctxT(t)
	const keep = time.Hour
	var order []string
	for i, job := range []string{"j1", "j2", "j3"} {
		c.Set(clockEpoch.Add(time.Duration(i) * time.Minute))
		arm(t, e, "a1", job, c.Now())
		l := claimOne(t, e, time.Minute)
		noErr(t, e.Kill(ctx, l, "gave up"), "kill")
		order = append(order, l.ScheduleID)
	}
	list := func(at time.Time, max int) []string {
		t.Helper()
		c.Set(at)
		feed, err := e.ListFailed(ctx, "a1", keep, max)
		noErr(t, err, "list failed")
		ids := []string{}
		for _, d := range feed {
			ids = append(ids, d.ScheduleID)
		}
		return ids
	}
	equal(t, fmt.Sprint(list(clockEpoch.Add(2*time.Minute), 10)), fmt.Sprint(order), "oldest first")
	equal(t, fmt.Sprint(list(clockEpoch.Add(2*time.Minute), 2)), fmt.Sprint(order[:2]), "the oldest two")
	// The first died at +0: kept up to and including +1h, gone after.
	equal(t, fmt.Sprint(list(clockEpoch.Add(keep), 10)), fmt.Sprint(order), "at the retention")
	equal(t, fmt.Sprint(list(clockEpoch.Add(keep+time.Millisecond), 10)), fmt.Sprint(order[1:]), "past the retention")
	// The second (+1m) is past the retention at +1h1m1ms: an ack does not count it.
	c.Set(clockEpoch.Add(keep + time.Minute + time.Millisecond))
	n, err := e.AckFailed(ctx, "a1", keep, []string{order[1], order[2]})
	noErr(t, err, "ack")
	equal(t, n, 1, "acked within the retention")
	equal(t, len(list(clockEpoch.Add(keep+time.Minute+time.Millisecond), 10)), 0, "failed fires left")
	dead, _, err := e.ListDead(ctx, "a1", "", 10)
	noErr(t, err, "list dead")
	equal(t, len(dead), 3, "dead letters after the retention")
}
