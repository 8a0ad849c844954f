package relaytest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// Factory makes the engines the suite tests.
type Factory struct {
	// New returns a new, empty engine on the real clock. Required. The
	// factory owns the engine's lifetime (register Close with t.Cleanup).
	New func(t *testing.T) relay.Engine
	// NewWithClock, when set, returns a new, empty engine that reads time
	// from clock alone; the fake-clock section runs only then.
	NewWithClock func(t *testing.T, clock *Clock) relay.Engine
	// Peer, when set, returns another engine on the same store as e, as a
	// second process would open it (its own connections and wake-ups); the
	// tests of what one process learns from another run only then.
	Peer func(t *testing.T, e relay.Engine) relay.Engine
}

// RunEngineSuite runs the conformance suite against the engines of f. Every
// test runs in parallel on its own engine.
func RunEngineSuite(t *testing.T, f Factory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("relaytest: Factory.New is required")
	}
	runEach(t, f, realTests)
	runEach(t, f, lastFireTests)
	runEach(t, f, flowTests)
	runEach(t, f, directTests)
	if f.NewWithClock == nil {
		return
	}
	for _, tc := range flowClockTests {
		t.Run("clock/"+tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewClock(clockEpoch)
			tc.run(t, f.NewWithClock(t, c), c)
		})
	}
	for _, tc := range clockTests {
		t.Run("clock/"+tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewClock(clockEpoch)
			tc.run(t, f.NewWithClock(t, c), c)
		})
	}
}

// engineTest is one test of the suites that runs on one engine.
type engineTest struct {
	name string
	run  func(t *testing.T, e relay.Engine)
}

// runEach runs tests as subtests of t, in parallel, each on a new engine of
// f.
func runEach(t *testing.T, f Factory, tests []engineTest) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, f.New(t))
		})
	}
}

// realTests run on the real clock.
var realTests = []engineTest{
	{"ArmUpsert", testArmUpsert},
	{"ArmReplaceLosesLease", testArmReplaceLosesLease},
	{"ArmSameWhileLeased", testArmSameWhileLeased},
	{"ArmSameMovesCallback", testArmSameMovesCallback},
	{"FireAtSpelling", testFireAtSpelling},
	{"Quota", testQuota},
	{"Cancel", testCancel},
	{"Get", testGet},
	{"ListPaging", testListPaging},
	{"InvalidCursor", testInvalidCursor},
	{"ClaimNotBeforeFireAt", testClaimNotBeforeFireAt},
	{"ClaimOnce", testClaimOnce},
	{"ClaimCarriesDelivery", testClaimCarriesDelivery},
	{"ClaimBatch", testClaimBatch},
	{"Fencing", testFencing},
	{"Extend", testExtend},
	{"AckRemoves", testAckRemoves},
	{"NackRedue", testNackRedue},
	{"KillDeadLetters", testKillDeadLetters},
	{"FailedFires", testFailedFires},
	{"ListDead", testListDead},
	{"Replay", testReplay},
	{"ReplayAgent", testReplayAgent},
	{"ReplayDropsRearmed", testReplayDropsRearmed},
	{"ReplayKeepsFencing", testReplayKeepsFencing},
	{"Reap", testReap},
	{"NextDue", testNextDue},
	{"WakeOnArm", testWakeOnArm},
	{"WakeOnNack", testWakeOnNack},
	{"WakeOnReplay", testWakeOnReplay},
	{"WakeOnReap", testWakeOnReap},
	{"InstanceStopped", testInstanceStopped},
	{"FirstDelivery", testFirstDelivery},
	{"CancelAgent", testCancelAgent},
	{"Stats", testStats},
	{"ConcurrentClaims", testConcurrentClaims},
}

func testArmUpsert(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(time.Hour)
	first := arm(t, e, "a1", "job", at)
	equal(t, first.Changed, true, "first arm changed")
	equal(t, first.Replaced, "", "first arm replaced")

	// The same instant, written in another zone and with another id: a no-op.
	same, err := e.Arm(ctx, relay.ArmRequest{
		AgentID: "a1", InstanceID: "inst-a1", JobID: "job",
		FireAt: at.In(time.FixedZone("x", 5*3600)), ScheduleID: newID(),
	})
	noErr(t, err, "arm again")
	equal(t, same.Changed, false, "same arm changed")
	equal(t, same.OneShot.ScheduleID, first.OneShot.ScheduleID, "same arm schedule id")
	equal(t, same.Replaced, "", "same arm replaced")

	later := arm(t, e, "a1", "job", at.Add(time.Minute))
	equal(t, later.Changed, true, "re-arm changed")
	equal(t, later.Replaced, first.OneShot.ScheduleID, "re-arm replaced")
	if later.OneShot.ScheduleID == first.OneShot.ScheduleID {
		t.Fatal("re-arm kept the old schedule id")
	}
	got, err := e.Get(ctx, "a1", "job")
	noErr(t, err, "get")
	equal(t, got.ScheduleID, later.OneShot.ScheduleID, "get schedule id")
	sameTime(t, got.FireAt, at.Add(time.Minute), "get fire_at")
	equal(t, stats(t, e).Armed, 1, "armed count")
}

func testArmReplaceLosesLease(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	re := arm(t, e, "a1", "job", now().Add(time.Hour))
	equal(t, re.Replaced, l.ScheduleID, "replaced")
	lost(t, e, l)
	got, err := e.Get(ctxT(t), "a1", "job")
	noErr(t, err, "get")
	equal(t, got.ScheduleID, re.OneShot.ScheduleID, "schedule id after re-arm")
	equal(t, got.State, relay.StateArmed, "state after re-arm")
	equal(t, got.Attempt, 0, "attempt after re-arm")
}

func testArmSameWhileLeased(t *testing.T, e relay.Engine) {
	at := now().Add(-time.Second)
	first := arm(t, e, "a1", "job", at)
	l := claimOne(t, e, time.Minute)
	again := arm(t, e, "a1", "job", at)
	equal(t, again.Changed, false, "arm of the leased instant changed")
	equal(t, again.OneShot.ScheduleID, first.OneShot.ScheduleID, "schedule id")
	noErr(t, e.Ack(ctxT(t), l), "ack of the lease after a no-op arm")
}

// testArmSameMovesCallback: arming the same instant again keeps the schedule
// id but follows an agent that moved its callback URL or instance.
func testArmSameMovesCallback(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(time.Hour)
	first := arm(t, e, "a1", "job", at)
	again, err := e.Arm(ctx, relay.ArmRequest{
		AgentID: "a1", InstanceID: "inst-moved", JobID: "job",
		FireAt: at, CallbackURL: "https://moved.example/cb", ScheduleID: newID(),
	})
	noErr(t, err, "arm with a new callback")
	equal(t, again.OneShot.ScheduleID, first.OneShot.ScheduleID, "schedule id")
	got, err := e.Get(ctx, "a1", "job")
	noErr(t, err, "get")
	equal(t, got.CallbackURL, "https://moved.example/cb", "callback url")
	equal(t, got.InstanceID, "inst-moved", "instance id")
	equal(t, got.ScheduleID, first.OneShot.ScheduleID, "schedule id after get")
}

// testFireAtSpelling: the agent's spelling of fire_at is kept with the row
// through every state (armed, leased, dead, replayed); arming the same
// instant in another spelling keeps the schedule id and takes the new one.
func testFireAtSpelling(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(-time.Second)
	plus2 := at.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05.000-07:00")
	minus5 := at.In(time.FixedZone("", -5*3600)).Format("2006-01-02T15:04:05.000000-07:00")
	armAs := func(job, spelling string) relay.ArmResult {
		t.Helper()
		res, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a1", InstanceID: "inst-a1", JobID: job, FireAt: at,
			FireAtSpelling: spelling, CallbackURL: "https://a1.example/cb", ScheduleID: newID()})
		noErr(t, err, "arm "+job)
		return res
	}
	spelt := func(job, want, what string) {
		t.Helper()
		got, err := e.Get(ctx, "a1", job)
		noErr(t, err, "get "+job)
		equal(t, got.FireAtSpelling, want, what)
	}

	first := armAs("job", plus2)
	equal(t, first.OneShot.FireAtSpelling, plus2, "arm result spelling")
	spelt("job", plus2, "spelling after arm")
	items, _, err := e.List(ctx, "a1", "", 10)
	noErr(t, err, "list")
	equal(t, len(items), 1, "listed")
	equal(t, items[0].FireAtSpelling, plus2, "listed spelling")

	// The same instant in another spelling, then in the canonical one: the
	// same fire, spelt as last written.
	again := armAs("job", minus5)
	equal(t, again.Changed, false, "respelt arm changed")
	equal(t, again.OneShot.ScheduleID, first.OneShot.ScheduleID, "respelt schedule id")
	equal(t, again.OneShot.FireAtSpelling, minus5, "respelt arm result")
	spelt("job", minus5, "spelling after a respelt arm")
	canon := armAs("job", "")
	equal(t, canon.Changed, false, "canonical arm changed")
	spelt("job", "", "spelling after a canonical arm")
	armAs("job", plus2)
	armAs("plain", "")
	spelt("plain", "", "canonical spelling")

	// Leased, dead-lettered and replayed, it keeps its spelling.
	var l relay.Lease
	for _, x := range claim(t, e, 10, time.Minute) {
		if x.JobID == "job" {
			l = x
		} else {
			noErr(t, e.Ack(ctx, x), "ack")
		}
	}
	equal(t, l.FireAtSpelling, plus2, "leased spelling")
	spelt("job", plus2, "spelling while leased")
	noErr(t, e.Kill(ctx, l, "gave up"), "kill")
	dead, _, err := e.ListDead(ctx, "a1", "", 10)
	noErr(t, err, "list dead")
	equal(t, len(dead), 1, "dead letters")
	equal(t, dead[0].FireAtSpelling, plus2, "dead spelling")
	rp, err := e.Replay(ctx, []string{l.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	spelt("job", plus2, "spelling after replay")
	sameTime(t, claimOne(t, e, time.Minute).FireAt, at, "replayed fire_at")
}

func testQuota(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(time.Hour)
	req := func(agent, job string, fireAt time.Time) relay.ArmRequest {
		return relay.ArmRequest{AgentID: agent, JobID: job, FireAt: fireAt, ScheduleID: newID(), MaxArmed: 2}
	}
	for _, j := range []string{"j1", "j2"} {
		_, err := e.Arm(ctx, req("a1", j, at))
		noErr(t, err, "arm "+j)
	}
	_, err := e.Arm(ctx, req("a1", "j3", at))
	isErr(t, err, relay.ErrQuotaExceeded, "arm over quota")
	if _, err := e.Get(ctx, "a1", "j3"); err == nil {
		t.Fatal("a refused arm wrote a row")
	}
	_, err = e.Arm(ctx, req("a1", "j1", at.Add(time.Minute)))
	noErr(t, err, "re-arm of an armed job at quota")
	_, err = e.Arm(ctx, req("a2", "j1", at))
	noErr(t, err, "another agent's arm")
	_, err = e.Cancel(ctx, "a1", "j2")
	noErr(t, err, "cancel")
	_, err = e.Arm(ctx, req("a1", "j3", at))
	noErr(t, err, "arm after a cancel freed the quota")
}

func testCancel(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	ok, err := e.Cancel(ctx, "a1", "nope")
	noErr(t, err, "cancel unknown")
	equal(t, ok, false, "cancel unknown reported")

	arm(t, e, "a1", "armed", now().Add(-time.Second))
	ok, err = e.Cancel(ctx, "a1", "armed")
	noErr(t, err, "cancel armed")
	equal(t, ok, true, "cancel armed reported")
	_, err = e.Get(ctx, "a1", "armed")
	isErr(t, err, relay.ErrNotFound, "get cancelled")
	equal(t, len(claim(t, e, 10, time.Minute)), 0, "claims of a cancelled fire")

	arm(t, e, "a1", "leased", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	ok, err = e.Cancel(ctx, "a1", "leased")
	noErr(t, err, "cancel leased")
	equal(t, ok, true, "cancel leased reported")
	lost(t, e, l)
	s := stats(t, e)
	equal(t, s.Armed, 0, "armed after cancels")
	equal(t, s.Leased, 0, "leased after cancels")
}

func testGet(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(time.Hour)
	res, err := e.Arm(ctx, relay.ArmRequest{
		AgentID: "a1", InstanceID: "i1", JobID: "job.x-1_y", FireAt: at,
		CallbackURL: "https://a1.example", ScheduleID: "sch-get-1",
	})
	noErr(t, err, "arm")
	equal(t, res.OneShot.ScheduleID, "sch-get-1", "arm schedule id")
	got, err := e.Get(ctx, "a1", "job.x-1_y")
	noErr(t, err, "get")
	equal(t, got.ScheduleID, "sch-get-1", "schedule id")
	equal(t, got.AgentID, "a1", "agent id")
	equal(t, got.InstanceID, "i1", "instance id")
	equal(t, got.JobID, "job.x-1_y", "job id")
	equal(t, got.CallbackURL, "https://a1.example", "callback url")
	equal(t, got.State, relay.StateArmed, "state")
	equal(t, got.Attempt, 0, "attempt")
	sameTime(t, got.FireAt, at, "fire_at")
	sameTime(t, got.DueAt, at, "due_at")
	_, err = e.Get(ctx, "a2", "job.x-1_y")
	isErr(t, err, relay.ErrNotFound, "another agent's job")
	_, err = e.Get(ctx, "a1", "other")
	isErr(t, err, relay.ErrNotFound, "unknown job")
}

func testListPaging(t *testing.T, e relay.Engine) {
	at := now().Add(time.Hour)
	want := []string{"j0", "j1", "j2", "j3", "j4", "j5", "j6"}
	for _, i := range []int{4, 0, 6, 2, 5, 1, 3} {
		arm(t, e, "a1", want[i], at.Add(time.Duration(i)*time.Second))
	}
	arm(t, e, "a0", "j0", at)
	arm(t, e, "a2", "j9", at)
	for _, tc := range []struct {
		limit, pages int
	}{{1, 7}, {3, 3}, {6, 2}, {7, 1}, {100, 1}} {
		jobs, pages := listAll(t, e, "a1", tc.limit)
		if !slices.Equal(jobs, want) {
			t.Fatalf("limit %d: jobs %v, want %v", tc.limit, jobs, want)
		}
		equal(t, pages, tc.pages, fmt.Sprintf("pages at limit %d", tc.limit))
	}
	jobs, _ := listAll(t, e, "nobody", 10)
	equal(t, len(jobs), 0, "jobs of an agent with none")

	// Rows removed behind the cursor do not disturb the pages after it.
	ctx := ctxT(t)
	page, next, err := e.List(ctx, "a1", "", 2)
	noErr(t, err, "list first page")
	equal(t, page[1].JobID, "j1", "last of first page")
	_, err = e.Cancel(ctx, "a1", "j1")
	noErr(t, err, "cancel j1")
	page, _, err = e.List(ctx, "a1", next, 2)
	noErr(t, err, "list second page")
	equal(t, page[0].JobID, "j2", "first of second page")
}

func testInvalidCursor(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(time.Hour)
	for _, j := range []string{"j1", "j2", "j3"} {
		arm(t, e, "a1", j, at)
		arm(t, e, "a2", j, at)
	}
	_, next, err := e.List(ctx, "a1", "", 1)
	noErr(t, err, "list")
	if next == "" {
		t.Fatal("no next cursor")
	}
	for _, tc := range []struct{ name, agent, cursor string }{
		{"garbage", "a1", "!!not a cursor!!"},
		{"base64 noise", "a1", "aGVsbG8gd29ybGQ"},
		{"another agent's cursor", "a2", next},
	} {
		_, _, err := e.List(ctx, tc.agent, tc.cursor, 10)
		isErr(t, err, relay.ErrInvalidCursor, "list with "+tc.name)
	}
	_, _, err = e.ListDead(ctx, "", "!!not a cursor!!", 10)
	isErr(t, err, relay.ErrInvalidCursor, "list dead with garbage")
}

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

func testKillDeadLetters(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	before := now()
	noErr(t, e.Kill(ctxT(t), l, "agent rejected: 404"), "kill")
	_, err := e.Get(ctxT(t), "a1", "job")
	isErr(t, err, relay.ErrNotFound, "get after kill")
	lost(t, e, l)
	items, _, err := e.ListDead(ctxT(t), "a1", "", 10)
	noErr(t, err, "list dead")
	equal(t, len(items), 1, "dead letters")
	d := items[0]
	equal(t, d.ScheduleID, l.ScheduleID, "dead schedule id")
	equal(t, d.AgentID, "a1", "dead agent")
	equal(t, d.JobID, "job", "dead job")
	equal(t, d.Attempt, 1, "dead attempt")
	equal(t, d.Reason, "agent rejected: 404", "dead reason")
	sameTime(t, d.FireAt, l.FireAt, "dead fire_at")
	if d.FailedAt.Before(before.Add(-time.Second)) || d.FailedAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("failed at %s, want about now", d.FailedAt)
	}
	s := stats(t, e)
	equal(t, s.DeadLetter, 1, "dead letter count")
	equal(t, s.Armed, 0, "armed count")
}

// failedIDs lists agent's failed fires (a day's retention) and returns their
// schedule ids in order.
func failedIDs(t *testing.T, e relay.Engine, agent string, max int) []string {
	t.Helper()
	feed, err := e.ListFailed(ctxT(t), agent, 24*time.Hour, max)
	noErr(t, err, "list failed of "+agent)
	ids := make([]string, 0, len(feed))
	for _, d := range feed {
		equal(t, d.AgentID, agent, "failed fire's agent")
		ids = append(ids, d.ScheduleID)
	}
	return ids
}

// ackFailed acknowledges ids of agent (a day's retention) and returns the count.
func ackFailed(t *testing.T, e relay.Engine, agent string, ids ...string) int {
	t.Helper()
	n, err := e.AckFailed(ctxT(t), agent, 24*time.Hour, ids)
	noErr(t, err, "ack failed of "+agent)
	return n
}

// testFailedFires: a read never consumes the feed; an ack removes only the
// caller's listable entries; a replay removes the entry, a new death brings it
// back; the dead letter itself is untouched by reads and acks.
func testFailedFires(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(-time.Second)
	for _, j := range []string{"j1", "j2", "j3"} {
		arm(t, e, "a1", j, at)
	}
	arm(t, e, "a2", "j1", at)
	byJob := map[string]string{} // a1's job → schedule id
	var a2ID string
	for _, l := range claim(t, e, 10, time.Minute) {
		noErr(t, e.Kill(ctx, l, "gave up"), "kill")
		if l.AgentID == "a1" {
			byJob[l.JobID] = l.ScheduleID
		} else {
			a2ID = l.ScheduleID
		}
	}
	equal(t, len(byJob), 3, "a1's dead letters")

	// Reading does not consume: the same three, every time.
	for range 3 {
		ids := failedIDs(t, e, "a1", 10)
		slices.Sort(ids)
		want := []string{byJob["j1"], byJob["j2"], byJob["j3"]}
		slices.Sort(want)
		equal(t, fmt.Sprint(ids), fmt.Sprint(want), "a1's failed fires")
	}
	feed, err := e.ListFailed(ctx, "a1", 0, 0)
	noErr(t, err, "list failed without bounds")
	equal(t, len(feed), 3, "failed fires without bounds")
	equal(t, feed[0].Reason, "gave up", "failed fire's reason")
	equal(t, len(failedIDs(t, e, "a1", 2)), 2, "failed fires under max")
	equal(t, fmt.Sprint(failedIDs(t, e, "a2", 10)), fmt.Sprint([]string{a2ID}), "a2's failed fires")

	// An ack counts only the caller's listable fires.
	equal(t, ackFailed(t, e, "a1", byJob["j1"], a2ID, "sch-unknown"), 1, "acked")
	equal(t, ackFailed(t, e, "a1", byJob["j1"]), 0, "acked twice")
	equal(t, ackFailed(t, e, "a1"), 0, "acked nothing")
	ids := failedIDs(t, e, "a1", 10)
	equal(t, len(ids), 2, "failed fires after the ack")
	if slices.Contains(ids, byJob["j1"]) {
		t.Fatal("an acknowledged fire is still listed")
	}
	equal(t, len(failedIDs(t, e, "a2", 10)), 1, "a2's failed fires after a1's ack of its id")
	all, _ := deadAll(t, e, "", 10)
	equal(t, len(all), 4, "dead letters after reads and acks")

	// A replayed fire is no longer a failed fire; if it dies again it is.
	rp, err := e.Replay(ctx, []string{byJob["j2"]})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	equal(t, fmt.Sprint(failedIDs(t, e, "a1", 10)), fmt.Sprint([]string{byJob["j3"]}), "failed fires after a replay")
	equal(t, ackFailed(t, e, "a1", byJob["j2"]), 0, "ack of a replayed fire")
	l := claimOne(t, e, time.Minute)
	equal(t, l.ScheduleID, byJob["j2"], "replayed fire claimed")
	noErr(t, e.Kill(ctx, l, "gave up again"), "kill again")
	feed, err = e.ListFailed(ctx, "a1", 24*time.Hour, 10)
	noErr(t, err, "list failed")
	equal(t, len(feed), 2, "failed fires after a second death")
	equal(t, feed[1].ScheduleID, byJob["j2"], "the fire that died again is the newest")
	equal(t, feed[1].Reason, "gave up again", "its new reason")
	equal(t, feed[1].Attempt, 1, "its attempts since the replay")
}

func testListDead(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(-time.Second)
	for i := range 5 {
		arm(t, e, "a1", fmt.Sprintf("j%d", i), at)
	}
	for i := range 2 {
		arm(t, e, "a2", fmt.Sprintf("j%d", i), at)
	}
	for _, l := range claim(t, e, 10, time.Minute) {
		noErr(t, e.Kill(ctx, l, "gave up"), "kill")
	}
	for _, tc := range []struct {
		agent        string
		limit, count int
		pages        int
	}{
		{"", 100, 7, 1},
		{"", 3, 7, 3},
		{"a1", 2, 5, 3},
		{"a1", 5, 5, 1},
		{"a2", 1, 2, 2},
		{"nobody", 10, 0, 1},
	} {
		items, pages := deadAll(t, e, tc.agent, tc.limit)
		what := fmt.Sprintf("list dead of %q by %d", tc.agent, tc.limit)
		equal(t, len(items), tc.count, what+": count")
		equal(t, pages, tc.pages, what+": pages")
		seen := map[string]bool{}
		for i, d := range items {
			if tc.agent != "" && d.AgentID != tc.agent {
				t.Fatalf("%s: got a dead letter of %s", what, d.AgentID)
			}
			if seen[d.ScheduleID] {
				t.Fatalf("%s: %s listed twice", what, d.ScheduleID)
			}
			seen[d.ScheduleID] = true
			if i > 0 && d.FailedAt.After(items[i-1].FailedAt) {
				t.Fatalf("%s: not newest first", what)
			}
		}
	}
}

func testReplay(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	arm(t, e, "a1", "job", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	noErr(t, e.Kill(ctx, l, "gave up"), "kill")
	// An unknown id fails the whole replay: nothing is replayed.
	_, err := e.Replay(ctx, []string{l.ScheduleID, "sch-unknown"})
	var unknown *relay.UnknownDeadLettersError
	if !errors.As(err, &unknown) || !errors.Is(err, relay.ErrNotFound) || fmt.Sprint(unknown.ScheduleIDs) != "[sch-unknown]" {
		t.Fatalf("replay with an unknown id: %v, want an UnknownDeadLettersError naming sch-unknown", err)
	}
	items, _ := deadAll(t, e, "", 10)
	equal(t, len(items), 1, "dead letters after a refused replay")
	rp, err := e.Replay(ctx, []string{l.ScheduleID, l.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	equal(t, len(rp.Dropped)+len(rp.Missing), 0, "dropped or missing")
	equal(t, rp.Replayed[0].ScheduleID, l.ScheduleID, "replayed entry")
	equal(t, rp.Replayed[0].JobID, "job", "replayed entry's job")
	equal(t, rp.Replayed[0].Reason, "gave up", "replayed entry's reason")
	got, err := e.Get(ctx, "a1", "job")
	noErr(t, err, "get replayed")
	equal(t, got.ScheduleID, l.ScheduleID, "replayed schedule id")
	equal(t, got.State, relay.StateArmed, "replayed state")
	equal(t, got.Attempt, 0, "replayed attempt")
	items, _ = deadAll(t, e, "", 10)
	equal(t, len(items), 0, "dead letters after replay")
	again := claimOne(t, e, time.Minute)
	equal(t, again.ScheduleID, l.ScheduleID, "claimed replay")
	equal(t, again.Attempt, 1, "attempt of the replay's claim")
	_, err = e.Replay(ctx, []string{l.ScheduleID})
	if !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("replay of an entry replayed before: %v, want not found", err)
	}
}

func testReplayAgent(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(-time.Second)
	arm(t, e, "a1", "j1", at)
	arm(t, e, "a1", "j2", at)
	arm(t, e, "a2", "j1", at)
	for _, l := range claim(t, e, 10, time.Minute) {
		noErr(t, e.Kill(ctx, l, "gave up"), "kill")
	}
	rp, err := e.ReplayAgent(ctx, "a1")
	noErr(t, err, "replay agent")
	equal(t, len(rp.Replayed), 2, "replayed")
	equal(t, len(rp.Dropped)+len(rp.Missing), 0, "dropped or missing")
	jobs, _ := listAll(t, e, "a1", 10)
	if !slices.Equal(jobs, []string{"j1", "j2"}) {
		t.Fatalf("armed after replay %v", jobs)
	}
	left, _ := deadAll(t, e, "", 10)
	equal(t, len(left), 1, "dead letters left")
	equal(t, left[0].AgentID, "a2", "agent of the one left")
	rp, err = e.ReplayAgent(ctx, "nobody")
	noErr(t, err, "replay of an agent with none")
	equal(t, len(rp.Replayed)+len(rp.Dropped), 0, "replayed of nobody")
}

// testReplayDropsRearmed: a dead letter whose job was armed again since is
// taken out without being re-armed and reported dropped, with the reason;
// the newer fire stands. With the ids of several agents, every entry is
// reported, replayed or dropped.
func testReplayDropsRearmed(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now().Add(-time.Second)
	arm(t, e, "a1", "job", at)
	arm(t, e, "a1", "other", at)
	arm(t, e, "a2", "job", at)
	var ids []string
	byAgentJob := map[string]string{}
	for _, l := range claim(t, e, 10, time.Minute) {
		noErr(t, e.Kill(ctx, l, "gave up"), "kill")
		ids = append(ids, l.ScheduleID)
		byAgentJob[l.AgentID+"/"+l.JobID] = l.ScheduleID
	}
	equal(t, len(ids), 3, "dead letters")
	re := arm(t, e, "a1", "job", now().Add(time.Hour))
	re2 := arm(t, e, "a2", "job", now().Add(time.Hour))
	rp, err := e.Replay(ctx, ids)
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	equal(t, rp.Replayed[0].ScheduleID, byAgentJob["a1/other"], "the one replayed")
	equal(t, len(rp.Dropped), 2, "dropped")
	equal(t, len(rp.Missing), 0, "missing")
	dropped := map[string]string{}
	for _, d := range rp.Dropped {
		dropped[d.ScheduleID] = d.Reason
		equal(t, d.JobID, "job", "dropped entry's job")
	}
	equal(t, dropped[byAgentJob["a1/job"]], relay.ReplayDropRearmed, "a1's drop reason")
	equal(t, dropped[byAgentJob["a2/job"]], relay.ReplayDropRearmed, "a2's drop reason")
	for _, r := range []relay.ArmResult{re, re2} {
		got, err := e.Get(ctx, r.OneShot.AgentID, "job")
		noErr(t, err, "get")
		equal(t, got.ScheduleID, r.OneShot.ScheduleID, "schedule id kept")
		sameTime(t, got.FireAt, r.OneShot.FireAt, "fire_at kept")
	}
	items, _ := deadAll(t, e, "", 10)
	equal(t, len(items), 0, "dead letters after the drop")

	// ReplayAgent reports its drops the same way.
	arm(t, e, "a3", "job", at)
	var l relay.Lease
	for _, c := range claim(t, e, 10, time.Minute) {
		if c.AgentID == "a3" {
			l = c
			noErr(t, e.Kill(ctx, c, "gave up"), "kill")
		} else {
			noErr(t, e.Ack(ctx, c), "ack")
		}
	}
	equal(t, l.AgentID, "a3", "a3's fire claimed")
	arm(t, e, "a3", "job", now().Add(time.Hour))
	rp, err = e.ReplayAgent(ctx, "a3")
	noErr(t, err, "replay agent")
	equal(t, len(rp.Replayed), 0, "replayed of a3")
	if len(rp.Dropped) != 1 || rp.Dropped[0].ScheduleID != l.ScheduleID || rp.Dropped[0].Reason != relay.ReplayDropRearmed {
		t.Fatalf("ReplayAgent dropped %+v, want %s as %s", rp.Dropped, l.ScheduleID, relay.ReplayDropRearmed)
	}
}

func testReplayKeepsFencing(t *testing.T, e relay.Engine) {
	// A holder whose lease expired long ago must not fence in on the claim of
	// a replay, even though the replay starts the attempts over.
	ctx := ctxT(t)
	arm(t, e, "a1", "job", now().Add(-time.Second))
	stale := claimOne(t, e, 50*time.Millisecond)
	eventually(t, 5*time.Second, "reap", func() bool {
		n, err := e.Reap(ctx)
		noErr(t, err, "reap")
		return n == 1
	})
	second := claimOne(t, e, time.Minute)
	noErr(t, e.Kill(ctx, second, "gave up"), "kill")
	rp, err := e.Replay(ctx, []string{second.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	cur := claimOne(t, e, time.Minute)
	equal(t, cur.Attempt, stale.Attempt, "attempt of the replay's claim")
	lost(t, e, stale)
	noErr(t, e.Ack(ctx, cur), "ack of the current lease")
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

// woken fails the test unless w is closed within a few seconds.
func woken(t *testing.T, w <-chan struct{}, after string) {
	t.Helper()
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatalf("no wake after %s", after)
	}
}

// Each wake test takes the channel right before the step that must close
// it, as a dispatcher does before it asks NextDue.

func testWakeOnArm(t *testing.T, e relay.Engine) {
	w := e.Wake()
	arm(t, e, "a1", "job", now().Add(time.Hour))
	woken(t, w, "an arm")
	// Every holder wakes, not one of them.
	w1, w2 := e.Wake(), e.Wake()
	arm(t, e, "a1", "job2", now().Add(time.Minute))
	woken(t, w1, "an arm (first holder)")
	woken(t, w2, "an arm (second holder)")
}

func testWakeOnNack(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	w := e.Wake()
	// Due again in a second: earlier than anything a dispatcher waits for.
	noErr(t, e.Nack(ctxT(t), l, time.Second, "agent answered 500"), "nack")
	woken(t, w, "a nack")
}

func testWakeOnReplay(t *testing.T, e relay.Engine) {
	res := arm(t, e, "a1", "job", now().Add(-time.Second))
	noErr(t, e.Kill(ctxT(t), claimOne(t, e, time.Minute), "gave up"), "kill")
	w := e.Wake()
	rp, err := e.Replay(ctxT(t), []string{res.OneShot.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	woken(t, w, "a replay")
}

func testWakeOnReap(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	claimOne(t, e, 50*time.Millisecond)
	w := e.Wake()
	eventually(t, 5*time.Second, "reap", func() bool {
		n, err := e.Reap(ctxT(t))
		noErr(t, err, "reap")
		return n == 1
	})
	woken(t, w, "a reap")
}

func testInstanceStopped(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	for _, step := range []struct {
		set        relay.InstanceState
		i1, i2, i3 bool
	}{
		{relay.InstanceStopped, true, false, false},
		{relay.InstanceStopped, true, false, false},
		{relay.InstanceRunning, false, false, false},
	} {
		noErr(t, e.SetInstanceState(ctx, "i1", step.set), "set instance state")
		for id, want := range map[string]bool{"i1": step.i1, "i2": step.i2, "i3": step.i3} {
			got, err := e.InstanceStopped(ctx, id)
			noErr(t, err, "instance stopped")
			equal(t, got, want, "stopped "+id)
		}
	}
	// A state the engine does not know is refused and changes nothing.
	noErr(t, e.SetInstanceState(ctx, "i2", relay.InstanceStopped), "stop i2")
	for _, bad := range []relay.InstanceState{"", "paused", "Stopped"} {
		if err := e.SetInstanceState(ctx, "i2", bad); err == nil {
			t.Errorf("SetInstanceState(%q) accepted", bad)
		}
		if err := e.SetInstanceState(ctx, "i3", bad); err == nil {
			t.Errorf("SetInstanceState(%q) accepted", bad)
		}
	}
	for id, want := range map[string]bool{"i2": true, "i3": false} {
		got, err := e.InstanceStopped(ctx, id)
		noErr(t, err, "instance stopped")
		equal(t, got, want, "stopped "+id+" after refused states")
	}
}

func testFirstDelivery(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	const ttl = 200 * time.Millisecond
	for _, step := range []struct {
		id    string
		first bool
	}{{"d1", true}, {"d1", false}, {"d2", true}, {"d1", false}} {
		got, err := e.FirstDelivery(ctx, step.id, ttl)
		noErr(t, err, "first delivery")
		equal(t, got, step.first, "first delivery of "+step.id)
	}
	eventually(t, 5*time.Second, "forgetting d1 after the ttl", func() bool {
		got, err := e.FirstDelivery(ctx, "d1", ttl)
		noErr(t, err, "first delivery")
		return got
	})
	got, err := e.FirstDelivery(ctx, "d1", time.Minute)
	noErr(t, err, "first delivery")
	equal(t, got, false, "first delivery right after it was recorded again")
}

func testCancelAgent(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	arm(t, e, "a1", "leased", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	arm(t, e, "a1", "j1", now().Add(time.Hour))
	arm(t, e, "a1", "j2", now().Add(time.Hour))
	arm(t, e, "a2", "j1", now().Add(time.Hour))
	n, err := e.CancelAgent(ctx, "a1")
	noErr(t, err, "cancel agent")
	equal(t, n, 3, "cancelled")
	jobs, _ := listAll(t, e, "a1", 10)
	equal(t, len(jobs), 0, "a1 jobs left")
	jobs, _ = listAll(t, e, "a2", 10)
	equal(t, len(jobs), 1, "a2 jobs left")
	lost(t, e, l)
	n, err = e.CancelAgent(ctx, "a1")
	noErr(t, err, "cancel agent again")
	equal(t, n, 0, "cancelled again")
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
