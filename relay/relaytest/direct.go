package relaytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// directTests check that engines keep a direct fire's cron key with its
// row (relay.OneShot.Direct) and apply relay.ArmKey on every arm.
var directTests = []engineTest{
	{"DirectArmStoresKey", testDirectArmStoresKey},
	{"DirectSameFireKeepsKey", testDirectSameFireKeepsKey},
	{"DirectRearmKeepsKey", testDirectRearmKeepsKey},
	{"DirectRekeySameFire", testDirectRekeySameFire},
	{"DirectRekeyNewFire", testDirectRekeyNewFire},
	{"DirectToMediated", testDirectToMediated},
	{"DirectCancelDropsKey", testDirectCancelDropsKey},
	{"DirectNackKeepsKey", testDirectNackKeepsKey},
	{"DirectDeadLetterKeepsKey", testDirectDeadLetterKeepsKey},
	{"DirectFlexAndSpelling", testDirectFlexAndSpelling},
	{"RekeyFloor", testRekeyFloor},
}

// directKey returns a made-up direct key minted at (whole milliseconds);
// engines keep Sealed opaque.
func directKey(n int, at time.Time) relay.DirectKey {
	return relay.DirectKey{
		Sealed:   fmt.Sprintf("v1.sealed-%d-%s", n, newID()),
		KeyID:    fmt.Sprintf("ck_key%d", n),
		MintedAt: at.Truncate(time.Millisecond),
	}
}

// armDirect arms job of agent at fireAt for direct delivery under k,
// keeping a held key minted at or after keepFrom.
func armDirect(t *testing.T, e relay.Engine, agent, job string, fireAt time.Time, k relay.DirectKey, keepFrom time.Time) relay.ArmResult {
	t.Helper()
	res, err := e.Arm(ctxT(t), relay.ArmRequest{
		AgentID:     agent,
		InstanceID:  "inst-" + agent,
		JobID:       job,
		FireAt:      fireAt,
		CallbackURL: "https://" + agent + ".example/cb",
		ScheduleID:  newID(),
		Direct:      k,
		KeepKeyFrom: keepFrom,
	})
	noErr(t, err, "arm direct "+agent+"/"+job)
	return res
}

// sameKey fails the test now unless got is want.
func sameKey(t *testing.T, got, want relay.DirectKey, what string) {
	t.Helper()
	equal(t, got.Sealed, want.Sealed, what+": sealed key")
	equal(t, got.KeyID, want.KeyID, what+": key id")
	sameTime(t, got.MintedAt, want.MintedAt, what+": minted at")
}

// getKey returns the key of (agent, job)'s row.
func getKey(t *testing.T, e relay.Engine, agent, job string) relay.DirectKey {
	t.Helper()
	o, err := e.Get(ctxT(t), agent, job)
	noErr(t, err, "get "+agent+"/"+job)
	return o.Direct
}

func testDirectArmStoresKey(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	t0 := now()
	k := directKey(1, t0)
	res := armDirect(t, e, "a1", "job", t0.Add(-time.Second), k, t0.Add(-time.Hour))
	equal(t, res.Changed, true, "changed")
	equal(t, res.Rekeyed, false, "rekeyed (a new row)")
	sameKey(t, res.OneShot.Direct, k, "arm result")
	sameKey(t, getKey(t, e, "a1", "job"), k, "get")
	arm(t, e, "a1", "other", t0.Add(time.Hour))
	items, _, err := e.List(ctx, "a1", "", 10)
	noErr(t, err, "list")
	equal(t, len(items), 2, "listed")
	sameKey(t, items[0].Direct, k, "list: direct row")
	equal(t, items[1].Direct.IsDirect(), false, "list: mediated row is direct")
	l := claimOne(t, e, time.Minute)
	sameKey(t, l.Direct, k, "lease")
	noErr(t, e.Ack(ctx, l), "ack")
	_, err = e.Get(ctx, "a1", "job")
	isErr(t, err, relay.ErrNotFound, "get after ack")
}

func testDirectSameFireKeepsKey(t *testing.T, e relay.Engine) {
	t0 := now()
	at := t0.Add(time.Hour)
	k1 := directKey(1, t0)
	first := armDirect(t, e, "a1", "job", at, k1, t0.Add(-time.Hour))
	again := armDirect(t, e, "a1", "job", at, directKey(2, t0.Add(time.Second)), t0.Add(-time.Hour))
	equal(t, again.Changed, false, "changed")
	equal(t, again.Rekeyed, false, "rekeyed")
	equal(t, again.OneShot.ScheduleID, first.OneShot.ScheduleID, "schedule id")
	sameKey(t, again.OneShot.Direct, k1, "arm result")
	sameKey(t, getKey(t, e, "a1", "job"), k1, "get")
	// A key minted exactly at KeepKeyFrom is kept too.
	edge := armDirect(t, e, "a1", "job", at, directKey(3, t0.Add(time.Second)), k1.MintedAt)
	sameKey(t, edge.OneShot.Direct, k1, "kept at KeepKeyFrom")
}

func testDirectRearmKeepsKey(t *testing.T, e relay.Engine) {
	t0 := now()
	k1 := directKey(1, t0)
	first := armDirect(t, e, "a1", "job", t0.Add(time.Hour), k1, time.Time{})
	next := armDirect(t, e, "a1", "job", t0.Add(2*time.Hour), directKey(2, t0), t0.Add(-time.Minute))
	equal(t, next.Changed, true, "changed")
	equal(t, next.Replaced, first.OneShot.ScheduleID, "replaced")
	equal(t, next.Rekeyed, false, "rekeyed")
	sameKey(t, next.OneShot.Direct, k1, "arm result")
	sameKey(t, getKey(t, e, "a1", "job"), k1, "get")
}

func testDirectRekeySameFire(t *testing.T, e relay.Engine) {
	t0 := now()
	at := t0.Add(time.Hour)
	first := armDirect(t, e, "a1", "job", at, directKey(1, t0.Add(-time.Minute)), time.Time{})
	k2 := directKey(2, t0)
	again := armDirect(t, e, "a1", "job", at, k2, t0.Add(-time.Second))
	equal(t, again.Changed, false, "changed")
	equal(t, again.Rekeyed, true, "rekeyed")
	equal(t, again.OneShot.ScheduleID, first.OneShot.ScheduleID, "schedule id")
	sameKey(t, again.OneShot.Direct, k2, "arm result")
	sameKey(t, getKey(t, e, "a1", "job"), k2, "get")
	// The new key is then kept.
	third := armDirect(t, e, "a1", "job", at, directKey(3, t0), t0.Add(-time.Second))
	equal(t, third.Rekeyed, false, "rekeyed again")
	sameKey(t, third.OneShot.Direct, k2, "kept new key")
}

func testDirectRekeyNewFire(t *testing.T, e relay.Engine) {
	t0 := now()
	armDirect(t, e, "a1", "job", t0.Add(time.Hour), directKey(1, t0.Add(-time.Minute)), time.Time{})
	k2 := directKey(2, t0)
	next := armDirect(t, e, "a1", "job", t0.Add(2*time.Hour), k2, t0.Add(-time.Second))
	equal(t, next.Changed, true, "changed")
	equal(t, next.Rekeyed, true, "rekeyed")
	sameKey(t, next.OneShot.Direct, k2, "arm result")
	sameKey(t, getKey(t, e, "a1", "job"), k2, "get")
}

func testDirectToMediated(t *testing.T, e relay.Engine) {
	t0 := now()
	at := t0.Add(time.Hour)
	first := armDirect(t, e, "a1", "job", at, directKey(1, t0), time.Time{})
	med := arm(t, e, "a1", "job", at)
	equal(t, med.Changed, false, "changed")
	equal(t, med.Rekeyed, true, "rekeyed to mediated")
	equal(t, med.OneShot.ScheduleID, first.OneShot.ScheduleID, "schedule id")
	equal(t, med.OneShot.Direct.IsDirect(), false, "arm result is direct")
	equal(t, getKey(t, e, "a1", "job").IsDirect(), false, "get is direct")
	med = arm(t, e, "a1", "job", at)
	equal(t, med.Rekeyed, false, "rekeyed a mediated fire")
	k2 := directKey(2, t0)
	back := armDirect(t, e, "a1", "job", at, k2, time.Time{})
	equal(t, back.Rekeyed, true, "rekeyed to direct")
	sameKey(t, getKey(t, e, "a1", "job"), k2, "get")
	// A new fire, mediated, drops the key too.
	next := arm(t, e, "a1", "job", at.Add(time.Hour))
	equal(t, next.Changed, true, "changed")
	equal(t, next.Rekeyed, true, "rekeyed to mediated with a new fire")
	equal(t, getKey(t, e, "a1", "job").IsDirect(), false, "get is direct")
}

func testDirectCancelDropsKey(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	t0 := now()
	at := t0.Add(time.Hour)
	armDirect(t, e, "a1", "job", at, directKey(1, t0), time.Time{})
	ok, err := e.Cancel(ctx, "a1", "job")
	noErr(t, err, "cancel")
	equal(t, ok, true, "cancelled")
	_, err = e.Get(ctx, "a1", "job")
	isErr(t, err, relay.ErrNotFound, "get after cancel")
	k2 := directKey(2, t0)
	res := armDirect(t, e, "a1", "job", at, k2, time.Time{})
	equal(t, res.Rekeyed, false, "rekeyed (a new row)")
	sameKey(t, res.OneShot.Direct, k2, "key after cancel")
}

func testDirectNackKeepsKey(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	t0 := now()
	k := directKey(1, t0)
	armDirect(t, e, "a1", "job", t0.Add(-time.Second), k, time.Time{})
	l := claimOne(t, e, time.Minute)
	noErr(t, e.Nack(ctx, l, 0, "agent busy"), "nack")
	sameKey(t, getKey(t, e, "a1", "job"), k, "get after nack")
	l2, _ := claimEventually(t, e, time.Minute, 5*time.Second)
	sameKey(t, l2.Direct, k, "lease after nack")
	ext, err := e.Extend(ctx, l2, time.Minute)
	noErr(t, err, "extend")
	sameKey(t, ext.Direct, k, "extended lease")
	noErr(t, e.Ack(ctx, l2), "ack")
}

func testDirectDeadLetterKeepsKey(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	t0 := now()
	k := directKey(1, t0)
	armDirect(t, e, "a1", "job", t0.Add(-time.Second), k, time.Time{})
	l := claimOne(t, e, time.Minute)
	noErr(t, e.Kill(ctx, l, "agent rejected: 404"), "kill")
	items, _ := deadAll(t, e, "a1", 10)
	equal(t, len(items), 1, "dead letters")
	sameKey(t, items[0].Direct, k, "dead letter")
	rp, err := e.Replay(ctx, []string{l.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	sameKey(t, getKey(t, e, "a1", "job"), k, "replayed row")
	again := claimOne(t, e, time.Minute)
	sameKey(t, again.Direct, k, "lease of the replay")
}

func testDirectFlexAndSpelling(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	t0 := now()
	at := t0.Add(time.Hour).Truncate(time.Second)
	k := directKey(1, t0)
	spelt := at.In(time.FixedZone("", 2*3600)).Format(time.RFC3339)
	for _, tc := range []struct {
		job      string
		flex     time.Duration
		spelling string
	}{
		{"plain", 0, ""},
		{"spelt", 0, spelt},
		{"flex", time.Minute, ""},
		{"both", time.Minute, spelt},
	} {
		res, err := e.Arm(ctx, relay.ArmRequest{
			AgentID: "a1", InstanceID: "inst-a1", JobID: tc.job, FireAt: at, FireAtSpelling: tc.spelling,
			CallbackURL: "https://a1.example/cb", Flex: tc.flex, ScheduleID: newID(), Direct: k,
		})
		noErr(t, err, "arm "+tc.job)
		got, err := e.Get(ctx, "a1", tc.job)
		noErr(t, err, "get "+tc.job)
		sameKey(t, got.Direct, k, tc.job)
		equal(t, got.Flex, tc.flex, tc.job+": flex")
		equal(t, got.FireAtSpelling, tc.spelling, tc.job+": spelling")
		equal(t, got.ScheduleID, res.OneShot.ScheduleID, tc.job+": schedule id")
		// Mediated again: the row loses the key and keeps the rest.
		med, err := e.Arm(ctx, relay.ArmRequest{
			AgentID: "a1", InstanceID: "inst-a1", JobID: tc.job, FireAt: at, FireAtSpelling: tc.spelling,
			CallbackURL: "https://a1.example/cb", Flex: tc.flex, ScheduleID: newID(),
		})
		noErr(t, err, "arm mediated "+tc.job)
		equal(t, med.Rekeyed, true, tc.job+": rekeyed")
		got, err = e.Get(ctx, "a1", tc.job)
		noErr(t, err, "get "+tc.job)
		equal(t, got.Direct.IsDirect(), false, tc.job+": direct after a mediated arm")
		equal(t, got.Flex, tc.flex, tc.job+": flex after a mediated arm")
		equal(t, got.FireAtSpelling, tc.spelling, tc.job+": spelling after a mediated arm")
	}
}

func testRekeyFloor(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	floor, err := e.RekeyFloor(ctx, "a1")
	noErr(t, err, "rekey floor")
	equal(t, floor.IsZero(), true, "floor of an agent never re-keyed is zero")
	t0 := now()
	got, err := e.RaiseRekeyFloor(ctx, "a1", t0)
	noErr(t, err, "raise")
	sameTime(t, got, t0, "raised floor")
	got, err = e.RaiseRekeyFloor(ctx, "a1", t0.Add(-time.Hour))
	noErr(t, err, "raise to an earlier time")
	sameTime(t, got, t0, "floor after an earlier time")
	// A fraction of a millisecond rounds up.
	got, err = e.RaiseRekeyFloor(ctx, "a1", t0.Add(time.Second+time.Microsecond))
	noErr(t, err, "raise again")
	sameTime(t, got, t0.Add(time.Second+time.Millisecond), "floor rounded up")
	floor, err = e.RekeyFloor(ctx, "a1")
	noErr(t, err, "rekey floor")
	sameTime(t, floor, got, "read floor")
	other, err := e.RekeyFloor(ctx, "a2")
	noErr(t, err, "rekey floor of another agent")
	equal(t, other.IsZero(), true, "floor of another agent is zero")
	armDirect(t, e, "a1", "job", t0.Add(time.Hour), directKey(1, t0), time.Time{})
	_, err = e.CancelAgent(ctx, "a1")
	noErr(t, err, "cancel agent")
	floor, err = e.RekeyFloor(ctx, "a1")
	noErr(t, err, "rekey floor after cancel agent")
	sameTime(t, floor, got, "floor after cancel agent")
}
