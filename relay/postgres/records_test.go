package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/internal/pgtest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/postgres"
)

// separateLookup is what LookupDelivery must agree with: FirstDelivery, then
// for a first delivery Get and InstanceStopped of the row's instance.
func separateLookup(ctx context.Context, e *postgres.Engine, id string, ttl time.Duration, agent, job string) (relay.DeliveryInfo, error) {
	first, err := e.FirstDelivery(ctx, id, ttl)
	if err != nil || !first {
		return relay.DeliveryInfo{}, err
	}
	info := relay.DeliveryInfo{First: true}
	row, err := e.Get(ctx, agent, job)
	switch {
	case errors.Is(err, relay.ErrNotFound):
		return info, nil
	case err != nil:
		return relay.DeliveryInfo{}, err
	}
	info.Found, info.Row = true, row
	info.Stopped, err = e.InstanceStopped(ctx, row.InstanceID)
	return info, err
}

// TestLookupDeliveryAgreesWithSeparateCalls compares LookupDelivery with
// the three calls it stands for, over the states a fire's row can be in:
// not armed, armed, armed for direct delivery with a window, leased, of a
// stopped instance; and a delivery id seen before.
func TestLookupDeliveryAgreesWithSeparateCalls(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.Now().Add(-time.Second).Truncate(time.Microsecond).Add(123 * time.Nanosecond)
	arm := func(job string, req relay.ArmRequest) {
		t.Helper()
		req.AgentID, req.JobID, req.InstanceID = "a1", job, "i-"+job
		req.CallbackURL, req.ScheduleID = "https://a1.example/"+job, "sch-"+job
		if req.FireAt.IsZero() {
			req.FireAt = at
		}
		if _, err := e.Arm(ctx, req); err != nil {
			t.Fatalf("arm %s: %v", job, err)
		}
	}
	arm("leased", relay.ArmRequest{FireAt: at.Add(-time.Hour)})
	if ls, err := e.Claim(ctx, 1, time.Minute, relay.Flow{}); err != nil || len(ls) != 1 {
		t.Fatalf("claim: %v, %v", ls, err)
	}
	arm("armed", relay.ArmRequest{FireAt: at.Add(time.Hour), FireAtSpelling: "spelt"})
	arm("direct", relay.ArmRequest{FireAt: at.Add(time.Hour), Flex: time.Minute,
		Direct: relay.DirectKey{Sealed: "v1.sealed", KeyID: "ck_1", MintedAt: at.Truncate(time.Millisecond)}})
	arm("stopped", relay.ArmRequest{FireAt: at.Add(time.Hour)})
	if err := e.SetInstanceState(ctx, "i-stopped", relay.InstanceStopped); err != nil {
		t.Fatal(err)
	}
	for i, job := range []string{"none", "armed", "direct", "leased", "stopped"} {
		id := fmt.Sprintf("d%d", i)
		got, err := e.LookupDelivery(ctx, "lookup-"+id, time.Minute, "a1", job)
		if err != nil {
			t.Fatalf("lookup %s: %v", job, err)
		}
		want, err := separateLookup(ctx, e, "separate-"+id, time.Minute, "a1", job)
		if err != nil {
			t.Fatalf("separate calls for %s: %v", job, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: LookupDelivery = %+v\nseparate calls = %+v", job, got, want)
		}
		if !got.First || got.Found != (job != "none") || got.Stopped != (job == "stopped") {
			t.Errorf("%s: LookupDelivery = %+v", job, got)
		}
		again, err := e.LookupDelivery(ctx, "lookup-"+id, time.Minute, "a1", job)
		if err != nil || again != (relay.DeliveryInfo{}) {
			t.Errorf("%s: a delivery id seen before: %+v, %v; want nothing", job, again, err)
		}
		if first, err := e.FirstDelivery(ctx, "lookup-"+id, time.Minute); err != nil || first {
			t.Errorf("%s: FirstDelivery of an id LookupDelivery recorded: %v, %v", job, first, err)
		}
	}
}

// TestReplayWakesPeers: a replayed fire is re-armed, due now, and its
// NOTIFY wakes another process's engine, whose claim takes it.
func TestReplayWakesPeers(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	peer := newEngine(t, postgres.Options{Schema: e.Schema()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: "j", FireAt: time.Now().Add(-time.Second), ScheduleID: "s1"}); err != nil {
		t.Fatal(err)
	}
	ls, err := e.Claim(ctx, 1, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %v, %v", ls, err)
	}
	if err := e.Kill(ctx, ls[0], "gave up"); err != nil {
		t.Fatal(err)
	}
	w := peer.Wake()
	rp, err := e.Replay(ctx, []string{"s1"})
	if err != nil || len(rp.Replayed) != 1 {
		t.Fatalf("replay: %+v, %v", rp, err)
	}
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer was not woken by the replay")
	}
	ls, err = peer.Claim(ctx, 1, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 1 || ls[0].ScheduleID != "s1" || ls[0].Attempt != 1 {
		t.Fatalf("claim of the replay: %+v, %v", ls, err)
	}
}

// TestUnarmedNewOnceAcrossProcesses: processes marking unarmed records at
// the same time see each record New once between them.
func TestUnarmedNewOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	engines := []*postgres.Engine{e, newEngine(t, postgres.Options{Schema: e.Schema()})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	at := time.Now().Add(-time.Hour)
	const records = 50
	for i := range records {
		if err := e.RecordLastFire(ctx, relay.LastFire{AgentID: "a1", JobID: fmt.Sprintf("j%02d", i),
			ScheduleID: fmt.Sprintf("s%d", i), FireAt: at, Outcome: relay.LastFireDelivered, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		seen  = map[string]int{}
		total int
	)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			u, _, err := engines[i%2].Unarmed(ctx, relay.UnarmedQuery{Before: time.Now(), Mark: true})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			total += len(u)
			for _, f := range u {
				if f.New {
					seen[f.JobID]++
				}
			}
		})
	}
	wg.Wait()
	if total != 8*records {
		t.Fatalf("the looks found %d records, want %d each", total, records)
	}
	if len(seen) != records {
		t.Fatalf("%d records were New to some look, want %d", len(seen), records)
	}
	for job, n := range seen {
		if n != 1 {
			t.Errorf("%s was New to %d looks, want 1", job, n)
		}
	}
}

// TestFirstDeliveryOnceAcrossProcesses: of calls for one delivery id from
// two processes at once, one is first.
func TestFirstDeliveryOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	engines := []*postgres.Engine{e, newEngine(t, postgres.Options{Schema: e.Schema()})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for round := range 20 {
		id := fmt.Sprintf("d%d", round)
		var firsts atomic.Int64
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				var first bool
				var err error
				if i%2 == 0 {
					first, err = engines[i%2].FirstDelivery(ctx, id, time.Minute)
				} else {
					var info relay.DeliveryInfo
					info, err = engines[i%2].LookupDelivery(ctx, id, time.Minute, "a1", "j")
					first = info.First
				}
				if err != nil {
					t.Error(err)
				}
				if first {
					firsts.Add(1)
				}
			})
		}
		wg.Wait()
		if n := firsts.Load(); n != 1 {
			t.Fatalf("delivery %s was first to %d calls, want 1", id, n)
		}
	}
}

// TestFirstDeliverySweepsExpired: records past their ttl by the engine's
// clock are deleted by later calls, not kept for good.
func TestFirstDeliverySweepsExpired(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	e := newEngine(t, postgres.Options{Now: now})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 300 {
		if _, err := e.FirstDelivery(ctx, fmt.Sprintf("old%d", i), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	clock = clock.Add(2 * time.Second)
	mu.Unlock()
	for i := range 400 {
		if _, err := e.FirstDelivery(ctx, fmt.Sprintf("new%d", i), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var old int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+e.Schema()+`.chronos_deliveries WHERE delivery_id LIKE 'old%'`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if old != 0 {
		t.Fatalf("%d expired records left after 400 later calls", old)
	}
}

// TestAddHistoryAtOnce: processes adding the same minutes and agents'
// deliveries at the same time neither fail nor lose counts, and each
// agent's recent deliveries stay bounded.
func TestAddHistoryAtOnce(t *testing.T) {
	t.Parallel()
	e := newEngine(t, postgres.Options{})
	engines := []*postgres.Engine{e, newEngine(t, postgres.Options{Schema: e.Schema()})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	const callers, calls = 8, 10
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for k := range calls {
				var minutes []relay.HistoryMinute
				for m := range 5 {
					i := (m + c) % 5 // each caller in another order
					minutes = append(minutes, relay.HistoryMinute{Minute: base.Add(time.Duration(i) * time.Minute),
						Outcomes: map[string]int64{relay.HistoryDelivered: 1}})
				}
				var recent []relay.DeliveryRecord
				for a := range 3 {
					for j := range 40 {
						recent = append(recent, relay.DeliveryRecord{AgentID: fmt.Sprintf("a%d", (a+c)%3),
							JobID: fmt.Sprintf("c%d-k%d-j%d", c, k, j), Outcome: relay.HistoryDelivered, At: time.Now()})
					}
				}
				if err := engines[c%2].AddHistory(ctx, minutes, recent); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := e.HistoryMinutes(ctx, base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d minutes, want 5", len(got))
	}
	for _, m := range got {
		if n := m.Outcomes[relay.HistoryDelivered]; n != callers*calls {
			t.Errorf("minute %s counted %d, want %d", m.Minute, n, callers*calls)
		}
	}
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var most int
	if err := conn.QueryRow(ctx, `SELECT max(n) FROM (SELECT count(*) AS n FROM `+e.Schema()+`.chronos_recent_deliveries
		GROUP BY agent_id) x`).Scan(&most); err != nil {
		t.Fatal(err)
	}
	// Trims racing each other may leave a call's worth over the bound.
	if most > relay.HistoryRecent+callers*40 {
		t.Fatalf("an agent keeps %d recent deliveries", most)
	}
}
