package relaytest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

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
