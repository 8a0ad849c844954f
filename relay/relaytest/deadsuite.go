package relaytest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

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
