package relaytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// lastFireTests run on the real clock: the records' times are the caller's.
var lastFireTests = []engineTest{
	{"LastFireUntilAcked", testLastFireUntilAcked},
	{"LastFireSupersededByArm", testLastFireSupersededByArm},
	{"LastFireReplaced", testLastFireReplaced},
	{"LastFireForget", testLastFireForget},
	{"LastFireExpiry", testLastFireExpiry},
	{"UnarmedFilters", testUnarmedFilters},
	{"UnarmedMark", testUnarmedMark},
	{"UnarmedManyAgents", testUnarmedManyAgents},
	{"Instances", testInstances},
}

// lastFire builds the record of a fire of res (an arm of agent/job).
func lastFire(res relay.ArmResult, outcome string, at time.Time) relay.LastFire {
	o := res.OneShot
	return relay.LastFire{AgentID: o.AgentID, InstanceID: o.InstanceID, JobID: o.JobID, ScheduleID: o.ScheduleID,
		FireAt: o.FireAt, CallbackURL: o.CallbackURL, Outcome: outcome, Reason: "because " + outcome, At: at}
}

func recordLastFire(t *testing.T, e relay.Engine, f relay.LastFire) {
	t.Helper()
	noErr(t, e.RecordLastFire(ctxT(t), f), "record last fire")
}

func lastFiresOf(t *testing.T, e relay.Engine, agent string) []relay.LastFire {
	t.Helper()
	out, err := e.LastFiresOf(ctxT(t), agent, time.Time{})
	noErr(t, err, "last fires of "+agent)
	return out
}

func unarmed(t *testing.T, e relay.Engine, q relay.UnarmedQuery) ([]relay.UnarmedFire, bool) {
	t.Helper()
	out, more, err := e.Unarmed(ctxT(t), q)
	noErr(t, err, "unarmed")
	return out, more
}

// sameLastFire checks every field of a record read back.
func sameLastFire(t *testing.T, got, want relay.LastFire) {
	t.Helper()
	sameTime(t, got.FireAt, want.FireAt, "fire_at")
	sameTime(t, got.At, want.At, "outcome at")
	got.FireAt, want.FireAt, got.At, want.At = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Fatalf("record = %+v, want %+v", got, want)
	}
}

func jobsOf(fs []relay.UnarmedFire) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, f.AgentID+"/"+f.JobID)
	}
	return out
}

// A record is listed to its agent from the moment it is written, while the
// fire's one-shot waits for its ack; it is unarmed only once the one-shot is
// gone.
func testLastFireUntilAcked(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now()
	res := arm(t, e, "a1", "job", at.Add(-time.Second).Add(123456*time.Nanosecond))
	l := claimOne(t, e, time.Minute)
	f := lastFire(res, relay.LastFireDelivered, at)
	recordLastFire(t, e, f)

	got := lastFiresOf(t, e, "a1")
	if len(got) != 1 {
		t.Fatalf("last fires while the ack is pending: %d records, want 1", len(got))
	}
	sameLastFire(t, got[0], f)
	if u, _ := unarmed(t, e, relay.UnarmedQuery{Before: at}); len(u) != 0 {
		t.Fatalf("unarmed while the fire's one-shot still exists: %v", jobsOf(u))
	}
	noErr(t, e.Ack(ctx, l), "ack")
	for _, agent := range []string{"", "a1"} {
		u, more := unarmed(t, e, relay.UnarmedQuery{AgentID: agent, Before: at})
		if len(u) != 1 || more {
			t.Fatalf("unarmed (agent %q) after the ack: %v (more %v), want a1/job", agent, jobsOf(u), more)
		}
		sameLastFire(t, u[0].LastFire, f)
	}
	if u, _ := unarmed(t, e, relay.UnarmedQuery{AgentID: "a2", Before: at}); len(u) != 0 {
		t.Fatalf("unarmed of another agent: %v", jobsOf(u))
	}
	equal(t, len(lastFiresOf(t, e, "a1")), 1, "records after the ack")
}

// Arming the job again (a new schedule id) supersedes the record for good:
// it is dropped, and does not come back when the new arm is cancelled.
func testLastFireSupersededByArm(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now()
	res := arm(t, e, "a1", "job", at.Add(time.Hour))
	_, err := e.Cancel(ctx, "a1", "job")
	noErr(t, err, "cancel")
	recordLastFire(t, e, lastFire(res, relay.LastFireInstanceStopped, at))
	equal(t, len(lastFiresOf(t, e, "a1")), 1, "records before the new arm")

	arm(t, e, "a1", "job", at.Add(2*time.Hour))
	equal(t, len(lastFiresOf(t, e, "a1")), 0, "records once armed again")
	if u, _ := unarmed(t, e, relay.UnarmedQuery{Before: at.Add(time.Hour)}); len(u) != 0 {
		t.Fatalf("unarmed once armed again: %v", jobsOf(u))
	}
	_, err = e.Cancel(ctx, "a1", "job")
	noErr(t, err, "cancel")
	equal(t, len(lastFiresOf(t, e, "a1")), 0, "records after the new arm was cancelled")
	if u, _ := unarmed(t, e, relay.UnarmedQuery{Before: at.Add(time.Hour)}); len(u) != 0 {
		t.Fatalf("a superseded record came back: %v", jobsOf(u))
	}
}

func testLastFireReplaced(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now()
	first := arm(t, e, "a1", "job", at.Add(time.Hour))
	_, err := e.Cancel(ctx, "a1", "job")
	noErr(t, err, "cancel")
	recordLastFire(t, e, lastFire(first, relay.LastFireDelivered, at))
	f := lastFire(first, relay.LastFireDeadLettered, at.Add(time.Second))
	f.Reason = ""
	recordLastFire(t, e, f)
	got := lastFiresOf(t, e, "a1")
	if len(got) != 1 {
		t.Fatalf("records after a second write: %d, want 1", len(got))
	}
	sameLastFire(t, got[0], f)
}

func testLastFireForget(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now()
	for _, job := range []string{"j1", "j2"} {
		res := arm(t, e, "a1", job, at.Add(time.Hour))
		_, err := e.Cancel(ctx, "a1", job)
		noErr(t, err, "cancel")
		recordLastFire(t, e, lastFire(res, relay.LastFireDelivered, at))
	}
	noErr(t, e.ForgetLastFire(ctx, "a1", "j1"), "forget")
	noErr(t, e.ForgetLastFire(ctx, "a1", "unknown"), "forget an unknown job")
	got := lastFiresOf(t, e, "a1")
	if len(got) != 1 || got[0].JobID != "j2" {
		t.Fatalf("records after forgetting j1: %+v", got)
	}
	u, _ := unarmed(t, e, relay.UnarmedQuery{Before: at})
	if len(u) != 1 || u[0].JobID != "j2" {
		t.Fatalf("unarmed after forgetting j1: %v", jobsOf(u))
	}
}

func testLastFireExpiry(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now()
	for i, job := range []string{"old", "new"} {
		res := arm(t, e, "a1", job, at.Add(time.Hour))
		_, err := e.Cancel(ctx, "a1", job)
		noErr(t, err, "cancel")
		recordLastFire(t, e, lastFire(res, relay.LastFireDelivered, at.Add(time.Duration(i)*time.Hour)))
	}
	u, _ := unarmed(t, e, relay.UnarmedQuery{Before: at.Add(2 * time.Hour), ExpireBefore: at.Add(time.Minute)})
	if len(u) != 1 || u[0].JobID != "new" {
		t.Fatalf("unarmed with the old record expired: %v", jobsOf(u))
	}
	got := lastFiresOf(t, e, "a1")
	if len(got) != 1 || got[0].JobID != "new" {
		t.Fatalf("an expired record is still listed: %+v", got)
	}
	got, err := e.LastFiresOf(ctx, "a1", at.Add(2*time.Hour))
	noErr(t, err, "last fires with expiry")
	equal(t, len(got), 0, "records after every one expired")
}

// Unarmed lists the records at or before Before, oldest first, and reports
// whether Max cut it short.
func testUnarmedFilters(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now()
	for i := range 5 {
		job := fmt.Sprintf("j%d", i)
		res := arm(t, e, "a1", job, at.Add(time.Hour))
		_, err := e.Cancel(ctx, "a1", job)
		noErr(t, err, "cancel")
		// j4 is oldest, j0 newest.
		recordLastFire(t, e, lastFire(res, relay.LastFireDelivered, at.Add(-time.Duration(i)*time.Minute)))
	}
	for _, tc := range []struct {
		agent  string
		before time.Time
		max    int
		want   []string
		more   bool
	}{
		{"", at, 0, []string{"a1/j4", "a1/j3", "a1/j2", "a1/j1", "a1/j0"}, false},
		{"a1", at, 0, []string{"a1/j4", "a1/j3", "a1/j2", "a1/j1", "a1/j0"}, false},
		{"", at.Add(-2 * time.Minute), 0, []string{"a1/j4", "a1/j3", "a1/j2"}, false},
		{"a1", at.Add(-2*time.Minute - time.Millisecond), 0, []string{"a1/j4", "a1/j3"}, false},
		{"", at, 2, []string{"a1/j4", "a1/j3"}, true},
		{"a1", at, 5, []string{"a1/j4", "a1/j3", "a1/j2", "a1/j1", "a1/j0"}, false},
	} {
		u, more := unarmed(t, e, relay.UnarmedQuery{AgentID: tc.agent, Before: tc.before, Max: tc.max})
		if fmt.Sprint(jobsOf(u)) != fmt.Sprint(tc.want) || more != tc.more {
			t.Errorf("unarmed(agent %q, before %s, max %d) = %v more %v, want %v more %v",
				tc.agent, tc.before.Sub(at), tc.max, jobsOf(u), more, tc.want, tc.more)
		}
	}
}

// With Mark, a record is New the first time it is reported only; a look
// without Mark neither sees New nor marks.
func testUnarmedMark(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now()
	res := arm(t, e, "a1", "job", at.Add(time.Hour))
	_, err := e.Cancel(ctx, "a1", "job")
	noErr(t, err, "cancel")
	recordLastFire(t, e, lastFire(res, relay.LastFireDelivered, at))
	for i, step := range []struct {
		mark, wantNew bool
	}{{false, false}, {true, true}, {true, false}, {false, false}} {
		u, _ := unarmed(t, e, relay.UnarmedQuery{Before: at, Mark: step.mark})
		if len(u) != 1 || u[0].New != step.wantNew {
			t.Fatalf("step %d (mark %v): %+v, want one record with New %v", i, step.mark, u, step.wantNew)
		}
	}
	// A new outcome for the job is a new record: reported as new again.
	recordLastFire(t, e, lastFire(res, relay.LastFireDeadLettered, at.Add(time.Second)))
	u, _ := unarmed(t, e, relay.UnarmedQuery{Before: at.Add(time.Second), Mark: true})
	if len(u) != 1 || !u[0].New || u[0].Outcome != relay.LastFireDeadLettered {
		t.Fatalf("after a new outcome: %+v, want it new", u)
	}
}

// Records of many agents (over every shard) are all found, oldest first,
// and superseded ones among them are dropped on the way.
func testUnarmedManyAgents(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	at := now()
	var want []string
	for i := range 40 {
		agent := fmt.Sprintf("agent-%02d", i)
		res := arm(t, e, agent, "job", at.Add(time.Hour))
		_, err := e.Cancel(ctx, agent, "job")
		noErr(t, err, "cancel")
		recordLastFire(t, e, lastFire(res, relay.LastFireDelivered, at.Add(time.Duration(i)*time.Millisecond)))
		if i%3 == 0 {
			arm(t, e, agent, "job", at.Add(2*time.Hour)) // armed again: not unarmed
			continue
		}
		want = append(want, agent+"/job")
	}
	u, more := unarmed(t, e, relay.UnarmedQuery{Before: at.Add(time.Second)})
	if fmt.Sprint(jobsOf(u)) != fmt.Sprint(want) || more {
		t.Fatalf("unarmed = %v more %v, want %v", jobsOf(u), more, want)
	}
	for i := range 40 {
		agent := fmt.Sprintf("agent-%02d", i)
		if n := len(lastFiresOf(t, e, agent)); (i%3 == 0) != (n == 0) {
			t.Errorf("%s: %d records left", agent, n)
		}
	}
}

func testInstances(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	info, err := e.Instance(ctx, "i1")
	noErr(t, err, "instance")
	if info != (relay.InstanceInfo{InstanceID: "i1"}) {
		t.Fatalf("unknown instance: %+v", info)
	}
	stop, start := now(), now().Add(time.Minute)
	noErr(t, e.SetInstanceState(ctx, "i1", relay.InstanceStopped), "stop")
	noErr(t, e.NoteInstance(ctx, "i1", relay.InstanceStopped, stop), "note stop")
	noErr(t, e.SetInstanceCallback(ctx, "i1", "https://a1.example/cb"), "callback")
	info, err = e.Instance(ctx, "i1")
	noErr(t, err, "instance")
	equal(t, info.Stopped, true, "stopped")
	sameTime(t, info.StoppedAt, stop, "stopped at")
	equal(t, info.StartedAt.IsZero(), true, "started at unset")
	equal(t, info.CallbackURL, "https://a1.example/cb", "callback")

	noErr(t, e.SetInstanceState(ctx, "i1", relay.InstanceRunning), "start")
	noErr(t, e.NoteInstance(ctx, "i1", relay.InstanceRunning, start), "note start")
	noErr(t, e.SetInstanceCallback(ctx, "i1", "https://a1.example/cb2"), "callback moved")
	info, err = e.Instance(ctx, "i1")
	noErr(t, err, "instance")
	equal(t, info.Stopped, false, "stopped after start")
	sameTime(t, info.StoppedAt, stop, "stopped at after start")
	sameTime(t, info.StartedAt, start, "started at")
	equal(t, info.CallbackURL, "https://a1.example/cb2", "callback after a move")
	if err := e.NoteInstance(ctx, "i1", "paused", start.Add(time.Minute)); err == nil {
		t.Error("NoteInstance with an unknown state accepted")
	}
	info, err = e.Instance(ctx, "i1")
	noErr(t, err, "instance")
	sameTime(t, info.StoppedAt, stop, "stopped at after a refused note")
	sameTime(t, info.StartedAt, start, "started at after a refused note")
	other, err := e.Instance(ctx, "i2")
	noErr(t, err, "instance")
	equal(t, other.CallbackURL, "", "another instance's callback")
}
