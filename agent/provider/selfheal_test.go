package provider_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/activation"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/contract"
)

// healNAS is fakeNAS plus what NAS says of last fires and of the instance,
// and NAS's far-future limit.
type healNAS struct {
	*fakeNAS
	mu        sync.Mutex
	unarmed   []contract.UnarmedJob
	instance  *contract.InstanceStatus
	maxFuture time.Duration // 0: none
	down      bool          // every call fails
}

func (n *healNAS) List(ctx context.Context) (nasclient.Listing, error) {
	n.mu.Lock()
	down, unarmed, inst := n.down, n.unarmed, n.instance
	n.mu.Unlock()
	if down {
		return nasclient.Listing{}, errNASDown
	}
	l, err := n.fakeNAS.List(ctx)
	l.Unarmed, l.Instance = unarmed, inst
	return l, err
}

func (n *healNAS) Provision(ctx context.Context, req contract.ProvisionRequest) (contract.ProvisionResponse, error) {
	n.mu.Lock()
	down, maxFuture := n.down, n.maxFuture
	n.mu.Unlock()
	if down {
		return contract.ProvisionResponse{}, errNASDown
	}
	if maxFuture > 0 && req.FireAt.Sub(n.fakeNAS.now()) > maxFuture {
		return contract.ProvisionResponse{}, &nasclient.UnprocessableError{APIError: nasclient.APIError{StatusCode: 422, Code: contract.CodeFireAtTooFar}}
	}
	return n.fakeNAS.Provision(ctx, req)
}

func (n *healNAS) edit(fn func(n *healNAS)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fn(n)
}

type healBundle struct {
	*bundle
	hn *healNAS
}

// healSetup is setup with a healNAS and the serving agent's settings
// (CatchUp); now is the clock of the runtime and the reconciler.
func healSetup(t *testing.T, now func() time.Time, resync time.Duration) *healBundle {
	t.Helper()
	b := &bundle{home: t.TempDir(), clock: &clock{t: t0}, runs: &counter{runs: map[string]int{}}}
	if now == nil {
		now = b.clock.Now
	}
	rt, err := agent.Open(context.Background(), agent.Config{
		Home: b.home, Now: now, Logger: slog.New(slog.DiscardHandler),
		Runners: map[string]runner.Runner{"count": b.runs},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	b.rt = rt
	b.nas = newFakeNAS(now)
	hn := &healNAS{fakeNAS: b.nas}
	b.rec, err = provider.NewReconciler(provider.ReconcilerConfig{
		Source: rt, NAS: hn, CallbackURL: callback, Home: b.home, CatchUp: true, ResyncInterval: resync,
		Now: now, Logger: slog.New(slog.DiscardHandler), RetryBase: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &healBundle{bundle: b, hn: hn}
}

// ledgerOf returns the folded runs of job.
func (b *healBundle) ledgerOf(t *testing.T, job string) []ledger.Run {
	t.Helper()
	runs, err := b.rt.Ledger().Runs(context.Background(), ledger.Filter{JobID: job})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// bySlotState describes job's runs as "slot:state" sorted by slot.
func describe(runs []ledger.Run) string {
	var out []string
	for _, r := range runs {
		out = append(out, fmt.Sprintf("%s:%s", r.Slot.Sub(t0), r.State))
	}
	return strings.Join(out, " ")
}

func TestRefreshPoint(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	now := t0
	for _, tc := range []struct {
		slot    time.Time
		horizon time.Duration
		want    time.Time
	}{
		{now.Add(10 * day), 30 * day, now.Add(10 * day)},        // within: the slot itself
		{now.Add(30 * day), 30 * day, now.Add(30 * day)},        // exactly at the horizon
		{now.Add(45 * day), 30 * day, now.Add(15 * day)},        // one step back
		{now.Add(60 * day), 30 * day, now.Add(30 * day)},        // two horizons: the later point
		{now.Add(61 * day), 30 * day, now.Add(31*day - 30*day)}, // 61 - 2×30
		{now.Add(621 * day), 365 * day, now.Add(256 * day)},
		{now.Add(time.Hour), 0, now.Add(time.Hour)}, // no horizon
	} {
		got := provider.RefreshPoint(tc.slot, now, tc.horizon)
		if !got.Equal(tc.want) {
			t.Errorf("RefreshPoint(now+%s, horizon %s) = now+%s, want now+%s", tc.slot.Sub(now), tc.horizon, got.Sub(now), tc.want.Sub(now))
		}
		if !got.After(now) || got.Sub(now) > max(tc.horizon, tc.slot.Sub(now)) {
			t.Errorf("RefreshPoint(now+%s, %s) = now+%s is not within the horizon", tc.slot.Sub(now), tc.horizon, got.Sub(now))
		}
		// Stable while now advances towards it.
		if later := provider.RefreshPoint(tc.slot, now.Add(got.Sub(now)/2), tc.horizon); !later.Equal(got) {
			t.Errorf("RefreshPoint moved from now+%s to now+%s as time passed", got.Sub(now), later.Sub(now))
		}
	}
}

func TestResyncIntervalSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"", provider.DefaultResyncInterval, ""},
		{"30s", 30 * time.Second, ""},
		{"1h", time.Hour, ""},
		{"soon", 0, "not a duration"},
		{"500ms", 0, "at least 1s"},
		{"-5m", 0, "at least 1s"},
	} {
		c := provider.Config{Home: "/h", Listen: ":1", Cron: provider.CronConfig{Chronos: provider.ChronosConfig{ResyncInterval: tc.in}}}
		got, err := c.Cron.Chronos.Resync()
		verr := c.Validate()
		switch {
		case tc.err == "" && (err != nil || verr != nil || got != tc.want):
			t.Errorf("resync_interval %q = %s, %v (validate %v), want %s", tc.in, got, err, verr, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || verr == nil ||
			!strings.Contains(verr.Error(), "cron.chronos.resync_interval")):
			t.Errorf("resync_interval %q: error %v (validate %v), want one naming the key and %q", tc.in, err, verr, tc.err)
		}
	}
	c := provider.Config{}
	c.ApplyEnv(func(k string) (string, bool) { return "2m", k == "CHRONOS_CRON_CHRONOS_RESYNC_INTERVAL" })
	if c.Cron.Chronos.ResyncInterval != "2m" {
		t.Fatalf("the environment did not set resync_interval: %+v", c.Cron.Chronos)
	}
}

// NAS lost an arm (Redis flushed): nothing changes on the agent, yet the
// resync timer arms the job again; a resync that finds NAS in sync leaves
// InSync true throughout, so an idle agent still exits.
func TestResyncArmsAgainWhatNASLost(t *testing.T) {
	t.Parallel()
	b := healSetup(t, nil, 20*time.Millisecond)
	b.add(t, "a", "every 1h")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.rec.Run(ctx, nil) }()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "the first reconcile", func() bool { return b.rec.InSync() })
	// In sync across several resyncs: InSync never drops, and an idle
	// wait (which also needs InSync) ends.
	n := b.rec.Reconciles()
	idleCtx, stopIdle := context.WithTimeout(ctx, 5*time.Second)
	defer stopIdle()
	err := activation.WaitIdle(idleCtx, 100*time.Millisecond, nil, func(context.Context) string {
		if !b.rec.InSync() {
			return "not in sync"
		}
		return ""
	})
	if err != nil {
		t.Fatalf("an agent in sync did not become idle with a 20ms resync: %v", err)
	}
	for i := 0; i < 200 && b.rec.Reconciles() < n+3; i++ {
		if !b.rec.InSync() {
			t.Fatal("InSync dropped during a resync that found NAS in sync")
		}
		time.Sleep(time.Millisecond)
	}
	if b.rec.Reconciles() < n+3 {
		t.Fatalf("no resync within 200ms: %d reconciles", b.rec.Reconciles()-n)
	}

	b.nas.set(func(n *fakeNAS) { delete(n.arms, "a") }) // the store lost it
	waitFor(t, "the resync to arm the job again", func() bool { _, ok := b.nas.snapshot()["a"]; return ok })
	b.wantArmed(t, map[string]time.Time{"a": at(time.Hour)})
}

// waitFor polls cond every millisecond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A resync that finds something to do drops InSync at once (before it
// provisions), so an idle check never sees "in sync" while NAS lacks a fire.
func TestResyncThatFindsWorkDropsInSync(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	nas := &blockingNAS{fakeNAS: b.nas, listing: make(chan struct{}), release: make(chan struct{})}
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{Source: b.rt, NAS: &provisionWatch{blockingNAS: nas, rec: nil},
		CallbackURL: callback, Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-nas.listing; nas.release <- struct{}{} }()
	if _, err := rec.Reconcile(context.Background()); err != nil || !rec.InSync() {
		t.Fatalf("first reconcile: %v, in sync %v", err, rec.InSync())
	}
	// A resync with nothing to do: in sync while it lists.
	done := make(chan error, 1)
	go func() { _, err := rec.Reconcile(context.Background()); done <- err }()
	<-nas.listing
	if !rec.InSync() {
		t.Fatal("InSync dropped while a resync lists NAS")
	}
	nas.release <- struct{}{}
	if err := <-done; err != nil || !rec.InSync() {
		t.Fatalf("resync: %v, in sync %v", err, rec.InSync())
	}
	// NAS lost the arm: the resync must not provision while still "in sync".
	b.nas.set(func(n *fakeNAS) { delete(n.arms, "a") })
	pw := &provisionWatch{blockingNAS: nas}
	rec2, err := provider.NewReconciler(provider.ReconcilerConfig{Source: b.rt, NAS: pw, CallbackURL: callback, Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pw.rec = rec2
	go func() { <-nas.listing; nas.release <- struct{}{} }()
	if _, err := rec2.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pw.inSyncAtProvision == nil || *pw.inSyncAtProvision {
		t.Fatalf("in sync while provisioning a lost arm: %v", pw.inSyncAtProvision)
	}
}

// provisionWatch records the reconciler's InSync when a provision arrives.
type provisionWatch struct {
	*blockingNAS
	rec               *provider.Reconciler
	inSyncAtProvision *bool
}

func (p *provisionWatch) Provision(ctx context.Context, req contract.ProvisionRequest) (contract.ProvisionResponse, error) {
	if p.rec != nil {
		v := p.rec.InSync()
		p.inSyncAtProvision = &v
	}
	return p.blockingNAS.Provision(ctx, req)
}

// The operator stopped the instance and started it again: NAS dropped the
// fire of the 13:00 slot, and nothing was armed for 14:00 and 15:00. The
// agent records all three missed with NAS's reason, runs none, arms 16:00,
// and records nothing twice when it reconciles again.
func TestStoppedInstanceSlotsAreMissedNotRun(t *testing.T) {
	t.Parallel()
	for _, stillStopped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stopped=%v", stillStopped), func(t *testing.T) {
			t.Parallel()
			b := healSetup(t, nil, 0)
			b.add(t, "a", "every 1h")
			b.add(t, "b", "every 1h")
			stop, start := contract.NewTime(at(30*time.Minute)), contract.NewTime(at(3*time.Hour+20*time.Minute))
			b.hn.edit(func(n *healNAS) {
				n.unarmed = []contract.UnarmedJob{{JobID: "a", FireAt: contract.NewTime(at(time.Hour)), ScheduleID: "sch_1",
					Outcome: contract.LastFireInstanceStopped, Reason: "the operator stopped instance inst-1", OutcomeAt: contract.NewTime(at(time.Hour))}}
				n.instance = &contract.InstanceStatus{InstanceID: "inst-1", Stopped: stillStopped, StoppedAt: &stop}
				if !stillStopped {
					n.instance.StartedAt = &start
				}
			})
			b.clock.Set(at(3*time.Hour + 21*time.Minute))
			res := b.reconcile(t)
			if res.MissedRecorded != 6 {
				t.Fatalf("missed recorded %d, want 6 (three slots of two jobs): %+v", res.MissedRecorded, res)
			}
			for _, job := range []string{"a", "b"} {
				runs := b.ledgerOf(t, job)
				if got := describe(runs); got != "1h0m0s:missed 2h0m0s:missed 3h0m0s:missed" {
					t.Fatalf("%s: ledger %s", job, got)
				}
				for _, r := range runs {
					if !strings.Contains(r.Reason, "no fire arrived") || !strings.Contains(r.Reason, "stopped") {
						t.Errorf("%s slot %s: reason %q does not say the instance was stopped", job, r.Slot.Sub(t0), r.Reason)
					}
				}
			}
			if b.runs.runs["a"]+b.runs.runs["b"] != 0 {
				t.Fatalf("slots of a stopped instance ran: %v", b.runs.runs)
			}
			b.wantArmed(t, map[string]time.Time{"a": at(4 * time.Hour), "b": at(4 * time.Hour)})
			if res := b.reconcile(t); res.MissedRecorded != 0 || res.CaughtUp {
				t.Fatalf("second reconcile recorded again: %+v", res)
			}
			if n := len(b.ledgerOf(t, "a")); n != 3 {
				t.Fatalf("%d ledger runs after a second reconcile, want 3", n)
			}
		})
	}
}

// A dead-lettered fire NAS reports is recorded missed with its reason and
// not run; the next slot is armed.
func TestDeadLetteredSlotIsMissedWithNASReason(t *testing.T) {
	t.Parallel()
	b := healSetup(t, nil, 0)
	b.add(t, "a", "every 1h")
	b.hn.edit(func(n *healNAS) {
		n.unarmed = []contract.UnarmedJob{{JobID: "a", FireAt: contract.NewTime(at(time.Hour)), ScheduleID: "sch_1",
			Outcome: contract.LastFireDeadLettered, Reason: "gave up after 10 attempts: agent answered 500", OutcomeAt: contract.NewTime(at(time.Hour + time.Minute))}}
	})
	b.clock.Set(at(time.Hour + 5*time.Minute))
	b.reconcile(t)
	runs := b.ledgerOf(t, "a")
	if describe(runs) != "1h0m0s:missed" || !strings.Contains(runs[0].Reason, "agent answered 500") {
		t.Fatalf("ledger %s %+v", describe(runs), runs)
	}
	if b.runs.runs["a"] != 0 {
		t.Fatal("a dead-lettered slot ran")
	}
	b.wantArmed(t, map[string]time.Time{"a": at(2 * time.Hour)})
}

// A slot NAS holds no fire for (and says nothing of) goes to the misfire
// policy at once, its lines saying no fire arrived.
func TestSlotWithoutAFireRunsByMisfirePolicy(t *testing.T) {
	t.Parallel()
	b := healSetup(t, nil, 0)
	b.add(t, "a", "every 1h")
	b.clock.Set(at(3*time.Hour + time.Minute)) // 13:00, 14:00 and 15:00 passed
	res := b.reconcile(t)
	if !res.CaughtUp {
		t.Fatalf("result %+v", res)
	}
	runs := b.ledgerOf(t, "a")
	if got := describe(runs); !strings.HasPrefix(got, "1h0m0s:missed 2h0m0s:missed 3h0m0s:") {
		t.Fatalf("ledger %s", got)
	}
	for _, r := range runs {
		if !strings.Contains(r.Reason, "no fire arrived") {
			t.Errorf("slot %s (%s): reason %q does not say no fire arrived", r.Slot.Sub(t0), r.State, r.Reason)
		}
	}
	b.wantArmed(t, map[string]time.Time{"a": at(4 * time.Hour)})
}

// NAS holds the slot but does not deliver it: within the grace it is left
// to NAS; beyond it the backstop runs it through the misfire policy, once,
// and NAS's late fire then answers duplicate.
func TestBackstopRunsASlotNASHoldsButNeverDelivers(t *testing.T) {
	t.Parallel()
	b := healSetup(t, nil, 0)
	b.add(t, "a", "every 1h") // grace: half the period, 30 min
	b.nas.set(func(n *fakeNAS) { n.arms["a"] = armed("a", at(time.Hour)) })
	b.clock.Set(at(time.Hour + 29*time.Minute))
	if res := b.reconcile(t); res.CaughtUp || strings.Join(res.Delivering, ",") != "a" {
		t.Fatalf("within the grace: %+v", res)
	}
	b.clock.Set(at(time.Hour + 31*time.Minute))
	if res := b.reconcile(t); !res.CaughtUp {
		t.Fatalf("beyond the grace: %+v", res)
	}
	waitFor(t, "the backstop's run", func() bool {
		b.runs.mu.Lock()
		defer b.runs.mu.Unlock()
		return b.runs.runs["a"] == 1
	})
	r, err := b.rt.Fire(context.Background(), "a", at(time.Hour), agent.TriggerScheduled)
	if err != nil || r.Status != agent.FireDuplicate {
		t.Fatalf("NAS's late fire: %+v %v, want duplicate", r, err)
	}
	b.reconcile(t)
	b.runs.mu.Lock()
	n := b.runs.runs["a"]
	b.runs.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	runs := b.ledgerOf(t, "a")
	if len(runs) == 0 || !strings.Contains(runs[0].Reason, "no fire arrived within the grace") {
		t.Fatalf("ledger %+v", runs)
	}
	b.wantArmed(t, map[string]time.Time{"a": at(2 * time.Hour)})
}

// With NAS unreachable, a slot overdue by more than its grace runs through
// the misfire policy (once, however often the reconcile fails); within the
// grace it waits for NAS.
func TestBackstopRunsOverdueSlotsWhileNASIsUnreachable(t *testing.T) {
	t.Parallel()
	b := healSetup(t, nil, 0)
	b.add(t, "a", "every 1h")
	b.hn.edit(func(n *healNAS) { n.down = true })
	b.clock.Set(at(time.Hour + 10*time.Minute))
	if res, err := b.rec.Reconcile(context.Background()); err == nil || res.CaughtUp {
		t.Fatalf("within the grace: %+v, %v", res, err)
	}
	if b.next(t, "a") != at(time.Hour) {
		t.Fatal("the slot was handled within its grace")
	}
	b.clock.Set(at(time.Hour + 40*time.Minute))
	for range 3 {
		if _, err := b.rec.Reconcile(context.Background()); err == nil {
			t.Fatal("a reconcile with NAS down succeeded")
		}
	}
	waitFor(t, "the backstop's run", func() bool {
		b.runs.mu.Lock()
		defer b.runs.mu.Unlock()
		return b.runs.runs["a"] == 1
	})
	runs := b.ledgerOf(t, "a")
	if len(runs) != 1 || runs[0].Trigger != string(agent.TriggerCatchUp) || !strings.Contains(runs[0].Reason, "NAS unreachable") {
		t.Fatalf("ledger %+v", runs)
	}
	// NAS is back with its fire for 13:00: duplicate.
	b.hn.edit(func(n *healNAS) { n.down = false })
	r, err := b.rt.Fire(context.Background(), "a", at(time.Hour), agent.TriggerScheduled)
	if err != nil || r.Status != agent.FireDuplicate {
		t.Fatalf("NAS's late fire: %+v %v, want duplicate", r, err)
	}
	b.reconcile(t)
	b.wantArmed(t, map[string]time.Time{"a": at(2 * time.Hour)})
}

// Run wakes by itself when the earliest slot is overdue by more than its
// grace (the backstop timer): NAS holds the slot but never delivers it, and
// nothing else (no change, no resync timer, no failure) wakes the reconciler.
func TestBackstopTimerWakesRun(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64 // added to the real clock
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	b := healSetup(t, now, 0)
	j, _, err := b.rt.AddJob(context.Background(), agent.JobSpec{ID: "a", Schedule: "every 1h", Grace: 300 * time.Millisecond, Payload: runner.Payload{Kind: "count"}})
	if err != nil {
		t.Fatal(err)
	}
	// Jump to 100 ms before the first slot: it is armed, never delivered.
	offset.Store(int64(time.Until(*j.NextRunAt) - 100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	defer func() {
		cancel()
		<-done
	}()
	go func() { done <- b.rec.Run(ctx, nil) }()
	waitFor(t, "the slot to be armed", func() bool { _, ok := b.nas.snapshot()["a"]; return ok })
	reconciles := b.rec.Reconciles()
	waitFor(t, "the backstop to run the slot", func() bool {
		b.runs.mu.Lock()
		defer b.runs.mu.Unlock()
		return b.runs.runs["a"] == 1
	})
	if got := b.rec.Reconciles() - reconciles; got < 1 {
		t.Fatalf("the slot ran without a reconcile (%d)", got)
	}
	runs := b.ledgerOf(t, "a")
	if len(runs) != 1 || !runs[0].Slot.Equal(*j.NextRunAt) || !strings.Contains(runs[0].Reason, "no fire arrived within the grace") {
		t.Fatalf("ledger %+v", runs)
	}
}

// A slot beyond NAS's horizon is armed as a refresh fire within it; NAS's
// own, shorter limit halves the horizon until NAS takes it. The agent is in
// sync. The refresh fire, when it comes, runs nothing and records nothing,
// and the next reconcile arms the next refresh point (or the slot).
func TestSlotBeyondTheHorizonIsArmedAsARefreshFire(t *testing.T) {
	t.Parallel()
	b := healSetup(t, nil, 0)
	b.hn.edit(func(n *healNAS) { n.maxFuture = 100 * 24 * time.Hour })
	j := b.add(t, "leap", "0 0 29 2 *")
	slot := *j.NextRunAt
	if slot.Sub(t0) < 400*24*time.Hour {
		t.Fatalf("the next 29 February is only %s away", slot.Sub(t0))
	}
	b.reconcile(t)
	if !b.rec.InSync() {
		t.Fatal("not in sync with a refresh fire armed")
	}
	h := b.rec.Horizon()
	if h > 100*24*time.Hour || h < 50*24*time.Hour {
		t.Fatalf("horizon %s after NAS refused 365 days and more than 100 days", h)
	}
	refresh := provider.RefreshPoint(slot, t0, h)
	b.wantArmed(t, map[string]time.Time{"leap": refresh})
	if res := b.reconcile(t); len(res.Provisioned) != 0 || !b.rec.InSync() {
		t.Fatalf("a second reconcile changed something: %+v", res)
	}
	o, err := b.rec.Observe(context.Background())
	if err != nil || !o.Plan.InSync() {
		t.Fatalf("observe: %+v %v", o.Plan, err)
	}

	b.clock.Set(refresh)
	r, err := b.rt.Fire(context.Background(), "leap", refresh, agent.TriggerScheduled)
	if err != nil || r.Status != agent.FireRefreshed {
		t.Fatalf("refresh fire: %+v %v", r, err)
	}
	if runs := b.ledgerOf(t, "leap"); len(runs) != 0 {
		t.Fatalf("a refresh fire wrote the ledger: %+v", runs)
	}
	if b.next(t, "leap") != slot {
		t.Fatal("a refresh fire moved the job")
	}
	b.nas.set(func(n *fakeNAS) { delete(n.arms, "leap") }) // NAS acked the refresh fire
	b.clock.Set(refresh.Add(time.Second))
	b.reconcile(t)
	b.wantArmed(t, map[string]time.Time{"leap": provider.RefreshPoint(slot, refresh.Add(time.Second), h)})
	if got := b.nas.snapshot()["leap"]; !got.After(refresh) {
		t.Fatalf("re-armed at %s, not after the refresh point %s", got, refresh)
	}
}
