package relaytest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// RunHistorySuite checks an engine's relay.History: minutes added by two
// processes sum up and read back in order within the range asked; recent
// deliveries are per agent, newest first and bounded; the due histogram
// counts armed one-shots by step; beats older than asked are left out.
// With f.Peer, what one process adds another reads.
func RunHistorySuite(t *testing.T, f Factory) {
	t.Run("Minutes", func(t *testing.T) {
		t.Parallel()
		testHistoryMinutes(t, f)
	})
	t.Run("RecentDeliveries", func(t *testing.T) {
		t.Parallel()
		testRecentDeliveries(t, f.New(t))
	})
	t.Run("DueHistogram", func(t *testing.T) {
		t.Parallel()
		testDueHistogram(t, f.New(t))
	})
	t.Run("Processes", func(t *testing.T) {
		t.Parallel()
		testProcesses(t, f.New(t))
	})
}

func history(t *testing.T, e relay.Engine) relay.History {
	t.Helper()
	h, ok := e.(relay.History)
	if !ok {
		t.Fatalf("%T does not implement relay.History", e)
	}
	return h
}

func testHistoryMinutes(t *testing.T, f Factory) {
	ctx := ctxT(t)
	e := f.New(t)
	a := history(t, e)
	b := a
	if f.Peer != nil {
		b = history(t, f.Peer(t, e))
	}
	base := now().Truncate(time.Minute).Add(-30 * time.Minute)
	lag := func(bucket int, n int64) []int64 {
		l := make([]int64, len(relay.HistoryLagBounds)+1)
		l[bucket] = n
		return l
	}
	noErr(t, a.AddHistory(ctx, []relay.HistoryMinute{
		{Minute: base, Outcomes: map[string]int64{relay.HistoryDelivered: 3, relay.HistoryRetry: 1}, Retries: 1, Lag: lag(2, 3)},
		{Minute: base.Add(2 * time.Minute), Outcomes: map[string]int64{relay.HistoryRejected: 1}},
	}, nil), "add history")
	noErr(t, b.AddHistory(ctx, []relay.HistoryMinute{
		{Minute: base, Outcomes: map[string]int64{relay.HistoryDelivered: 2}, Lag: lag(2, 1)},
	}, nil), "add history (peer)")
	for _, h := range []relay.History{a, b} {
		got, err := h.HistoryMinutes(ctx, base, base.Add(time.Hour))
		noErr(t, err, "history minutes")
		if len(got) != 2 {
			t.Fatalf("history minutes = %+v, want 2 minutes", got)
		}
		m := got[0]
		if !m.Minute.Equal(base) || m.Outcomes[relay.HistoryDelivered] != 5 || m.Outcomes[relay.HistoryRetry] != 1 ||
			m.Retries != 1 || len(m.Lag) != len(relay.HistoryLagBounds)+1 || m.Lag[2] != 4 {
			t.Fatalf("first minute = %+v, want %s, 5 delivered, 1 retry, 4 in lag bucket 2", m, base)
		}
		if !got[1].Minute.Equal(base.Add(2*time.Minute)) || got[1].Outcomes[relay.HistoryRejected] != 1 {
			t.Fatalf("second minute = %+v", got[1])
		}
	}
	got, err := a.HistoryMinutes(ctx, base.Add(time.Minute), base.Add(2*time.Minute))
	noErr(t, err, "history minutes")
	if len(got) != 0 {
		t.Fatalf("history minutes of an empty range = %+v", got)
	}
}

func testRecentDeliveries(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	h := history(t, e)
	at := now().Add(-time.Minute)
	var recs []relay.DeliveryRecord
	for i := range relay.HistoryRecent + 5 {
		recs = append(recs, relay.DeliveryRecord{AgentID: "a", JobID: fmt.Sprintf("j%d", i), ScheduleID: newID(),
			FireAt: at, Attempt: 1, Outcome: relay.HistoryDelivered, Lag: 20 * time.Millisecond, At: at.Add(time.Duration(i) * time.Millisecond)})
	}
	recs = append(recs, relay.DeliveryRecord{AgentID: "b", JobID: "x", ScheduleID: newID(), FireAt: at, Attempt: 2,
		Outcome: relay.HistoryRetry, Reason: "agent unreachable", At: at})
	noErr(t, h.AddHistory(ctx, nil, recs[:50]), "add recent")
	noErr(t, h.AddHistory(ctx, nil, recs[50:]), "add recent")
	got, err := h.RecentDeliveries(ctx, "a", 0)
	noErr(t, err, "recent deliveries")
	if len(got) != relay.HistoryRecent || got[0].JobID != fmt.Sprintf("j%d", relay.HistoryRecent+4) || got[len(got)-1].JobID != "j5" {
		t.Fatalf("recent of a: %d records, first %+v", len(got), got[0])
	}
	if got[0].Lag != 20*time.Millisecond || got[0].Outcome != relay.HistoryDelivered {
		t.Fatalf("newest record = %+v", got[0])
	}
	got, err = h.RecentDeliveries(ctx, "a", 3)
	noErr(t, err, "recent deliveries")
	if len(got) != 3 {
		t.Fatalf("recent of a (max 3): %d records", len(got))
	}
	got, err = h.RecentDeliveries(ctx, "nobody", 0)
	noErr(t, err, "recent deliveries")
	if len(got) != 0 {
		t.Fatalf("recent of an agent with none: %+v", got)
	}
	last, err := h.LastDeliveries(ctx)
	noErr(t, err, "last deliveries")
	if len(last) != 2 || last["a"].JobID != fmt.Sprintf("j%d", relay.HistoryRecent+4) || last["b"].Reason != "agent unreachable" {
		t.Fatalf("last deliveries = %+v", last)
	}
}

func testDueHistogram(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	h := history(t, e)
	from := now().Truncate(time.Hour).Add(time.Hour)
	for i, off := range []time.Duration{time.Minute, 10 * time.Minute, 2*time.Hour + time.Second, 5 * time.Hour} {
		_, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i-a", JobID: fmt.Sprintf("j%d", i), FireAt: from.Add(off),
			CallbackURL: "http://agent.test/fire", ScheduleID: newID()})
		noErr(t, err, "arm")
	}
	got, err := h.DueHistogram(ctx, from, time.Hour, 4)
	noErr(t, err, "due histogram")
	if want := []int64{2, 0, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("due histogram = %v, want %v", got, want)
	}
	if _, err := h.DueHistogram(ctx, from, 0, 4); err == nil {
		t.Fatal("due histogram with step 0: no error")
	}
}

func testProcesses(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	h := history(t, e)
	at := now()
	for _, p := range []relay.ProcessBeat{
		{ID: "r1", Kind: "relay", Host: "h2", PID: 2, Dispatchers: 2, StartedAt: at, BeatAt: at, LastClaim: at},
		{ID: "n1", Kind: "nas", Host: "h1", PID: 1, Dispatchers: 1, StartedAt: at, BeatAt: at},
		{ID: "old", Kind: "relay", Host: "h3", PID: 3, StartedAt: at, BeatAt: at.Add(-time.Hour)},
	} {
		noErr(t, h.Beat(ctx, p), "beat")
	}
	got, err := h.Processes(ctx, at.Add(-time.Minute))
	noErr(t, err, "processes")
	if len(got) != 2 || got[0].ID != "n1" || got[1].ID != "r1" || got[1].Dispatchers != 2 || !got[1].LastClaim.Equal(at) {
		t.Fatalf("processes = %+v, want n1 then r1", got)
	}
}
