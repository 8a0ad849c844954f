package provider_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/contract"
)

const callback = "https://agent.example"

var t0 = time.Date(2026, 6, 18, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func armed(job string, fireAt time.Time) contract.ArmedJob {
	return contract.ArmedJob{JobID: job, FireAt: contract.NewTime(fireAt), ScheduleID: "sch_" + job, AgentCallbackURL: callback}
}

func ids(arms []provider.Arm) string {
	var out []string
	for _, a := range arms {
		out = append(out, a.JobID)
	}
	return strings.Join(out, ",")
}

func TestComputePlan(t *testing.T) {
	t.Parallel()
	now := t0
	tests := []struct {
		name    string
		desired []agent.Desired
		waiting map[string]time.Time
		armed   []contract.ArmedJob
		want    [5]string // provision, cancel, delivering, unchanged, overdue
	}{
		{
			name:    "missing is provisioned",
			desired: []agent.Desired{{JobID: "a", FireAt: at(time.Hour)}},
			want:    [5]string{"a", "", "", "", ""},
		},
		{
			name:    "same instant in another offset is unchanged",
			desired: []agent.Desired{{JobID: "a", FireAt: at(time.Hour)}},
			armed:   []contract.ArmedJob{armed("a", at(time.Hour).In(time.FixedZone("", -5*3600)))},
			want:    [5]string{"", "", "", "a", ""},
		},
		{
			name:    "changed time is provisioned again",
			desired: []agent.Desired{{JobID: "a", FireAt: at(time.Hour)}},
			armed:   []contract.ArmedJob{armed("a", at(2*time.Hour))},
			want:    [5]string{"a", "", "", "", ""},
		},
		{
			name:    "changed callback is provisioned again",
			desired: []agent.Desired{{JobID: "a", FireAt: at(time.Hour)}},
			armed:   []contract.ArmedJob{{JobID: "a", FireAt: contract.NewTime(at(time.Hour)), ScheduleID: "s", AgentCallbackURL: "https://old.example"}},
			want:    [5]string{"a", "", "", "", ""},
		},
		{
			name:    "orphans are cancelled, future or past",
			desired: []agent.Desired{{JobID: "a", FireAt: at(time.Hour)}},
			armed:   []contract.ArmedJob{armed("a", at(time.Hour)), armed("gone", at(time.Hour)), armed("old", at(-time.Hour))},
			want:    [5]string{"", "gone,old", "", "a", ""},
		},
		{
			name:    "a past arm the job waits for is being delivered",
			waiting: map[string]time.Time{"a": at(-2 * time.Second)},
			armed:   []contract.ArmedJob{armed("a", at(-2*time.Second))},
			want:    [5]string{"", "", "a", "", ""},
		},
		{
			name:    "an overdue slot NAS does not hold is overdue",
			waiting: map[string]time.Time{"a": at(-time.Minute), "b": at(-time.Minute)},
			armed:   []contract.ArmedJob{armed("b", at(time.Hour))},
			want:    [5]string{"", "b", "", "", "a,b"},
		},
		{
			name:    "past desired times are never armed",
			desired: []agent.Desired{{JobID: "a", FireAt: now}, {JobID: "b", FireAt: at(-time.Second)}},
			want:    [5]string{"", "", "", "", ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := provider.ComputePlan(tt.desired, tt.waiting, tt.armed, callback+"/", now)
			got := [5]string{ids(p.Provision), ids(p.Cancel), ids(p.Delivering), ids(p.Unchanged), ids(p.Overdue)}
			if got != tt.want {
				t.Fatalf("plan provision/cancel/delivering/unchanged/overdue = %q, want %q", got, tt.want)
			}
			if p.InSync() != (tt.want[0] == "" && tt.want[1] == "" && tt.want[4] == "") {
				t.Fatalf("InSync %v", p.InSync())
			}
		})
	}
}

// fakeNAS is an in-memory NAS that checks requests as NAS would and can be
// told to fail.
type fakeNAS struct {
	mu       sync.Mutex
	now      func() time.Time
	arms     map[string]contract.ArmedJob
	failed   []contract.FailedFire // listed until acknowledged
	failNext map[string]int        // op -> how many calls fail
	calls    map[string]int
	seq      int
	// acked lists the schedule ids of every ack call; onAck, when set, runs
	// at each (before it applies); noAck makes the ack route absent.
	acked [][]string
	onAck func(ids []string)
	noAck bool
}

func newFakeNAS(now func() time.Time) *fakeNAS {
	return &fakeNAS{now: now, arms: map[string]contract.ArmedJob{}, failNext: map[string]int{}, calls: map[string]int{}}
}

var errNASDown = errors.New("nas down")

func (n *fakeNAS) fail(op string) error {
	n.calls[op]++
	if n.failNext[op] > 0 {
		n.failNext[op]--
		return fmt.Errorf("%s: %w", op, errNASDown)
	}
	return nil
}

func (n *fakeNAS) List(context.Context) (nasclient.Listing, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.fail("list"); err != nil {
		return nasclient.Listing{}, err
	}
	var l nasclient.Listing
	for _, a := range n.arms {
		l.Armed = append(l.Armed, a)
	}
	l.FailedFires = slices.Clone(n.failed) // reported until acknowledged
	return l, nil
}

func (n *fakeNAS) AckFailedFires(_ context.Context, ids []string) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.noAck {
		n.calls["ack"]++
		return 0, fmt.Errorf("%w: 404", nasclient.ErrUnsupported)
	}
	if n.onAck != nil {
		n.onAck(ids)
	}
	if err := n.fail("ack"); err != nil {
		return 0, err
	}
	n.acked = append(n.acked, slices.Clone(ids))
	before := len(n.failed)
	n.failed = slices.DeleteFunc(n.failed, func(f contract.FailedFire) bool { return slices.Contains(ids, f.ScheduleID) })
	return before - len(n.failed), nil
}

// listedFailed returns the schedule ids NAS still lists as failed.
func (n *fakeNAS) listedFailed() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, f := range n.failed {
		out = append(out, f.ScheduleID)
	}
	return out
}

func (n *fakeNAS) Provision(_ context.Context, req contract.ProvisionRequest) (contract.ProvisionResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.fail("provision"); err != nil {
		return contract.ProvisionResponse{}, err
	}
	if req.DedupKey != req.JobID+":"+contract.FormatTime(req.FireAt.Time) || req.AgentCallbackURL != callback {
		return contract.ProvisionResponse{}, fmt.Errorf("bad provision %+v", req)
	}
	if n.now().Sub(req.FireAt.Time) > contract.DefaultFireAtPastSkewSec*time.Second {
		return contract.ProvisionResponse{}, &nasclient.UnprocessableError{APIError: nasclient.APIError{StatusCode: 422, Code: contract.CodeFireAtInPast}}
	}
	if a, ok := n.arms[req.JobID]; ok && a.FireAt.Equal(req.FireAt.Time) {
		return contract.ProvisionResponse{ScheduleID: a.ScheduleID, FireAt: a.FireAt, Armed: true}, nil
	}
	n.seq++
	a := contract.ArmedJob{JobID: req.JobID, FireAt: req.FireAt, ScheduleID: fmt.Sprintf("sch_%d", n.seq), AgentCallbackURL: req.AgentCallbackURL}
	n.arms[req.JobID] = a
	return contract.ProvisionResponse{ScheduleID: a.ScheduleID, FireAt: a.FireAt, Armed: true}, nil
}

func (n *fakeNAS) Cancel(_ context.Context, jobID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.fail("cancel"); err != nil {
		return err
	}
	delete(n.arms, jobID)
	return nil
}

func (n *fakeNAS) snapshot() map[string]time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]time.Time{}
	for id, a := range n.arms {
		out[id] = a.FireAt.UTC()
	}
	return out
}

func (n *fakeNAS) set(fn func(n *fakeNAS)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fn(n)
}

// clock is a settable clock shared by the runtime and the reconciler.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// counter is a host-defined runner that counts runs per job.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) Validate(runner.Payload) error { return nil }
func (c *counter) Run(_ context.Context, req runner.Request) runner.Result {
	c.mu.Lock()
	c.runs[req.JobID]++
	c.mu.Unlock()
	return runner.Result{}
}

type bundle struct {
	home  string
	clock *clock
	rt    *agent.Runtime
	nas   *fakeNAS
	runs  *counter
	rec   *provider.Reconciler
}

func setup(t *testing.T, catchUp bool) *bundle {
	t.Helper()
	b := &bundle{home: t.TempDir(), clock: &clock{t: t0}, runs: &counter{runs: map[string]int{}}}
	ctx := context.Background()
	rt, err := agent.Open(ctx, agent.Config{
		Home: b.home, Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler),
		Runners: map[string]runner.Runner{"count": b.runs},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	b.rt = rt
	b.nas = newFakeNAS(b.clock.Now)
	b.rec, err = provider.NewReconciler(provider.ReconcilerConfig{
		Source: rt, NAS: b.nas, CallbackURL: callback, Home: b.home, CatchUp: catchUp,
		Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler), RetryBase: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bundle) add(t *testing.T, id, sched string) job.Job {
	t.Helper()
	j, _, err := b.rt.AddJob(context.Background(), agent.JobSpec{ID: id, Schedule: sched, Payload: runner.Payload{Kind: "count"}})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (b *bundle) reconcile(t *testing.T) provider.Result {
	t.Helper()
	res, err := b.rec.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

// wantArmed checks NAS holds exactly the jobs' next_run_at.
func (b *bundle) wantArmed(t *testing.T, want map[string]time.Time) {
	t.Helper()
	got := b.nas.snapshot()
	if len(got) != len(want) {
		t.Fatalf("armed %v, want %v", got, want)
	}
	for id, w := range want {
		if !got[id].Equal(w) {
			t.Fatalf("armed %v, want %v", got, want)
		}
	}
}

func (b *bundle) next(t *testing.T, id string) time.Time {
	t.Helper()
	j, err := b.rt.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.NextRunAt == nil {
		t.Fatalf("job %s has no next_run_at", id)
	}
	return *j.NextRunAt
}

func TestReconcileArmsMissingChangedAndCancelsOrphans(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "hourly", "every 1h")
	b.add(t, "daily", "every 24h")
	b.nas.set(func(n *fakeNAS) {
		n.arms["daily"] = armed("daily", at(3*time.Hour)) // wrong time
		n.arms["ghost"] = armed("ghost", at(time.Hour))   // no such job
	})

	res := b.reconcile(t)
	b.wantArmed(t, map[string]time.Time{"hourly": at(time.Hour), "daily": at(24 * time.Hour)})
	if strings.Join(res.Provisioned, ",") != "daily,hourly" || strings.Join(res.Cancelled, ",") != "ghost" || !res.OK {
		t.Fatalf("result %+v", res)
	}

	// Idempotent: a second reconcile changes nothing.
	if res := b.reconcile(t); len(res.Provisioned)+len(res.Cancelled) != 0 {
		t.Fatalf("second reconcile %+v", res)
	}

	// A paused job is disarmed; a removed one too.
	if _, err := b.rt.Pause(context.Background(), "hourly", "test"); err != nil {
		t.Fatal(err)
	}
	b.reconcile(t)
	b.wantArmed(t, map[string]time.Time{"daily": at(24 * time.Hour)})
	if err := b.rt.Remove(context.Background(), "daily"); err != nil {
		t.Fatal(err)
	}
	b.reconcile(t)
	b.wantArmed(t, map[string]time.Time{})

	st, err := provider.ReadState(b.home)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts.Reconciles != 4 || st.Counts.Provisioned != 2 || st.Counts.Cancelled != 3 || st.Last == nil || !st.Last.OK {
		t.Fatalf("state %+v", st)
	}
}

func TestReconcileFailureIsRecordedAndHealed(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.add(t, "b", "every 2h")
	b.nas.set(func(n *fakeNAS) { n.failNext["provision"] = 1 })

	res, err := b.rec.Reconcile(context.Background())
	if !errors.Is(err, errNASDown) || res.OK || b.rec.InSync() {
		t.Fatalf("reconcile: %+v, %v", res, err)
	}
	if len(b.nas.snapshot()) != 1 {
		t.Fatalf("one provision should still succeed: %v", b.nas.snapshot())
	}
	st, _ := provider.ReadState(b.home)
	if st.Counts.Failures != 1 || len(st.Errors) != 1 || st.Errors[0].Op != "provision" || st.Errors[0].JobID != "a" {
		t.Fatalf("state %+v", st)
	}

	b.reconcile(t)
	b.wantArmed(t, map[string]time.Time{"a": at(time.Hour), "b": at(2 * time.Hour)})
	st, _ = provider.ReadState(b.home)
	if !st.Last.OK || st.LastSuccessAt == nil || st.Counts.Failures != 1 || !b.rec.InSync() {
		t.Fatalf("state after healing %+v", st)
	}
}

func TestRunRetriesOnABackoffTimer(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.nas.set(func(n *fakeNAS) { n.failNext["list"] = 3 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.rec.Run(ctx, nil) }()
	deadline := time.After(10 * time.Second)
	for !b.rec.InSync() {
		select {
		case <-deadline:
			t.Fatal("not healed")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.wantArmed(t, map[string]time.Time{"a": at(time.Hour)})
	if got := b.rec.Failures(); got != 3 {
		t.Fatalf("%d failures, want 3", got)
	}
}

func TestRunReconcilesOnChange(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.rec.Run(ctx, b.rt.Changes()) }()
	b.add(t, "a", "every 1h")
	deadline := time.After(10 * time.Second)
	for len(b.nas.snapshot()) == 0 {
		select {
		case <-deadline:
			t.Fatal("a job change did not reconcile")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
	b.wantArmed(t, map[string]time.Time{"a": at(time.Hour)})
}

// An overdue slot NAS does not hold goes to the misfire policy in the agent,
// and only the next, future slot is armed. The CLI does not run jobs.
func TestOverdueSlots(t *testing.T) {
	t.Parallel()
	for _, catchUp := range []bool{true, false} {
		t.Run(fmt.Sprintf("catchUp=%v", catchUp), func(t *testing.T) {
			t.Parallel()
			b := setup(t, catchUp)
			b.add(t, "a", "every 1h")
			b.clock.Set(at(time.Hour + time.Minute)) // the 13:00 slot is a minute overdue
			res := b.reconcile(t)
			if !catchUp {
				b.wantArmed(t, map[string]time.Time{})
				if res.CaughtUp || b.next(t, "a") != at(time.Hour) {
					t.Fatalf("the CLI must leave the slot to the agent: %+v", res)
				}
				return
			}
			if !res.CaughtUp {
				t.Fatalf("result %+v", res)
			}
			b.wantArmed(t, map[string]time.Time{"a": at(2 * time.Hour)})
			runs, err := b.rt.Ledger().Runs(context.Background(), ledger.Filter{JobID: "a"})
			if err != nil || len(runs) != 1 || !runs[0].Slot.Equal(at(time.Hour)) {
				t.Fatalf("runs %+v, %v", runs, err)
			}
		})
	}
}

// A slot NAS is delivering right now is left to NAS: not cancelled, not run
// locally.
func TestSlotBeingDeliveredIsLeftAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.nas.set(func(n *fakeNAS) { n.arms["a"] = armed("a", at(time.Hour)) })
	b.clock.Set(at(time.Hour + 2*time.Second))
	res := b.reconcile(t)
	if res.CaughtUp || len(res.Cancelled) != 0 || strings.Join(res.Delivering, ",") != "a" {
		t.Fatalf("result %+v", res)
	}
	b.wantArmed(t, map[string]time.Time{"a": at(time.Hour)})

	// The fire arrives: the claim advances the job and the next reconcile re-arms.
	r, err := b.rt.Fire(context.Background(), "a", at(time.Hour), agent.TriggerScheduled)
	if err != nil || r.Status != agent.FireAccepted {
		t.Fatalf("fire %+v %v", r, err)
	}
	b.reconcile(t)
	b.wantArmed(t, map[string]time.Time{"a": at(2 * time.Hour)})
}

// missedRuns returns the ledger's missed runs of job.
func (b *bundle) missedRuns(t *testing.T, job string) []ledger.Run {
	t.Helper()
	runs, err := b.rt.Ledger().Runs(context.Background(), ledger.Filter{JobID: job})
	if err != nil {
		t.Fatal(err)
	}
	var missed []ledger.Run
	for _, r := range runs {
		if r.State == ledger.StateMissed {
			missed = append(missed, r)
		}
	}
	return missed
}

func failedFire(job, sch string, slot time.Time) contract.FailedFire {
	return contract.FailedFire{JobID: job, FireAt: contract.NewTime(slot), ScheduleID: sch, Attempts: 7,
		Reason: "agent answered 500", FailedAt: contract.NewTime(slot.Add(9 * time.Minute))}
}

// A failed fire is written to the ledger as missed, and only then
// acknowledged to NAS, which stops listing it.
func TestFailedFiresAreRecordedThenAcknowledged(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.clock.Set(at(time.Hour + 10*time.Minute))
	// The slot NAS reports is written with an offset, as NAS echoes the
	// agent's spelling: the same slot.
	slot := contract.NewTimeSpelled(at(time.Hour), at(time.Hour).In(time.FixedZone("", 2*3600)).Format(time.RFC3339))
	b.nas.set(func(n *fakeNAS) {
		n.arms["a"] = armed("a", at(2*time.Hour))
		n.failed = []contract.FailedFire{failedFire("a", "sch_x", at(time.Hour))}
		n.failed[0].FireAt = slot
		n.onAck = func(ids []string) {
			if len(b.missedRuns(t, "a")) != 1 {
				t.Errorf("ack of %v before the ledger had the missed run", ids)
			}
		}
	})
	res := b.reconcile(t)
	if res.MissedRecorded != 1 || res.CaughtUp {
		t.Fatalf("result %+v", res)
	}
	missed := b.missedRuns(t, "a")
	if len(missed) != 1 || !strings.Contains(missed[0].Reason, "agent answered 500") || !missed[0].Slot.Equal(at(time.Hour)) {
		t.Fatalf("missed runs %+v", missed)
	}
	if fmt.Sprint(b.nas.acked) != "[[sch_x]]" || len(b.nas.listedFailed()) != 0 {
		t.Fatalf("acked %v, still listed %v", b.nas.acked, b.nas.listedFailed())
	}
	b.wantArmed(t, map[string]time.Time{"a": at(2 * time.Hour)})
	if res := b.reconcile(t); res.MissedRecorded != 0 || len(b.nas.acked) != 1 {
		t.Fatalf("a reconcile with nothing failed recorded %d, acked %v", res.MissedRecorded, b.nas.acked)
	}
}

// An acknowledgement that is lost leaves the fire listed: the next reconcile
// finds it recorded, writes nothing, and acknowledges it again.
func TestFailedFireAckLostIsNotRecordedTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.clock.Set(at(time.Hour + 10*time.Minute))
	b.nas.set(func(n *fakeNAS) {
		n.failed = []contract.FailedFire{failedFire("a", "sch_x", at(time.Hour))}
		n.failNext["ack"] = 1
	})
	res, err := b.rec.Reconcile(context.Background())
	if !errors.Is(err, errNASDown) || res.MissedRecorded != 1 || b.rec.InSync() {
		t.Fatalf("reconcile with the ack lost: %+v, %v", res, err)
	}
	if got := b.nas.listedFailed(); fmt.Sprint(got) != "[sch_x]" {
		t.Fatalf("listed %v after a lost ack", got)
	}
	for range 2 {
		res := b.reconcile(t)
		if res.MissedRecorded != 0 {
			t.Fatalf("the fire was recorded again: %+v", res)
		}
	}
	if missed := b.missedRuns(t, "a"); len(missed) != 1 {
		t.Fatalf("missed runs %+v, want exactly one", missed)
	}
	if fmt.Sprint(b.nas.acked) != "[[sch_x]]" || len(b.nas.listedFailed()) != 0 {
		t.Fatalf("acked %v, listed %v", b.nas.acked, b.nas.listedFailed())
	}
	st, err := provider.ReadState(b.home)
	if err != nil || st.Counts.MissedRecorded != 1 || len(st.PendingMissed) != 0 {
		t.Fatalf("state %+v, %v", st, err)
	}
}

// flakySource fails RecordMissed a number of times.
type flakySource struct {
	provider.Source
	mu    sync.Mutex
	fails int
}

func (s *flakySource) RecordMissed(ctx context.Context, jobID string, slot time.Time, reason string) (bool, error) {
	s.mu.Lock()
	fail := s.fails > 0
	if fail {
		s.fails--
	}
	s.mu.Unlock()
	if fail {
		return false, errors.New("disk full")
	}
	return s.Source.RecordMissed(ctx, jobID, slot, reason)
}

// A fire that could not be recorded is not acknowledged; once recorded, every
// schedule id NAS reported for that slot is, with one ledger line.
func TestFailedFireNotRecordedIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.clock.Set(at(time.Hour + 10*time.Minute))
	src := &flakySource{Source: b.rt, fails: 1}
	// No local catch-up: the slot stays owed until the missed line is written.
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{
		Source: src, NAS: b.nas, CallbackURL: callback, Home: b.home,
		Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The same slot failed twice: a replay died again under another id.
	b.nas.set(func(n *fakeNAS) {
		n.failed = []contract.FailedFire{failedFire("a", "sch_1", at(time.Hour)), failedFire("a", "sch_2", at(time.Hour))}
	})
	if _, err := rec.Reconcile(context.Background()); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("reconcile: %v", err)
	}
	if len(b.nas.acked) != 0 || len(b.missedRuns(t, "a")) != 0 {
		t.Fatalf("acked %v with nothing recorded", b.nas.acked)
	}
	if st, _ := provider.ReadState(b.home); len(st.PendingMissed) != 1 {
		t.Fatalf("pending %+v", st.PendingMissed)
	}
	res, err := rec.Reconcile(context.Background())
	if err != nil || res.MissedRecorded != 1 {
		t.Fatalf("second reconcile: %+v, %v", res, err)
	}
	if len(b.missedRuns(t, "a")) != 1 || fmt.Sprint(b.nas.acked) != "[[sch_1 sch_2]]" || len(b.nas.listedFailed()) != 0 {
		t.Fatalf("missed %d, acked %v, listed %v", len(b.missedRuns(t, "a")), b.nas.acked, b.nas.listedFailed())
	}
	if st, _ := provider.ReadState(b.home); len(st.PendingMissed) != 0 {
		t.Fatalf("pending %+v", st.PendingMissed)
	}
}

// A NAS without the ack route (it reports each failed fire once) is no
// failure.
func TestFailedFiresWithoutAckRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.clock.Set(at(time.Hour + 10*time.Minute))
	b.nas.set(func(n *fakeNAS) {
		n.failed = []contract.FailedFire{failedFire("a", "sch_x", at(time.Hour))}
		n.noAck = true
	})
	if res := b.reconcile(t); res.MissedRecorded != 1 || !res.OK || b.nas.calls["ack"] != 1 {
		t.Fatalf("result %+v, ack calls %d", res, b.nas.calls["ack"])
	}
}

// Observe is a read: the failed fires NAS reports are returned pending,
// neither recorded in the ledger nor acknowledged, and the state file's
// counters stay as they are; the next reconcile records and acknowledges
// them.
func TestObserveLeavesFailedFiresPending(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.add(t, "b", "every 1h")
	b.clock.Set(at(time.Hour + 10*time.Minute))
	b.nas.set(func(n *fakeNAS) {
		n.failed = []contract.FailedFire{failedFire("a", "sch_x", at(time.Hour)), failedFire("b", "sch_y", at(time.Hour))}
	})
	before, err := provider.ReadState(b.home)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		o, err := b.rec.Observe(context.Background())
		if err != nil || len(o.FailedFires) != 2 {
			t.Fatalf("observe: %+v, %v", o, err)
		}
	}
	if n := len(b.missedRuns(t, "a")) + len(b.missedRuns(t, "b")); n != 0 || len(b.nas.acked) != 0 || b.nas.calls["ack"] != 0 {
		t.Fatalf("observe recorded %d missed runs and acknowledged %v", n, b.nas.acked)
	}
	if b.nas.calls["provision"]+b.nas.calls["cancel"] != 0 {
		t.Fatalf("observe changed the armed set: %v", b.nas.calls)
	}
	if after, err := provider.ReadState(b.home); err != nil || after.Counts != before.Counts || len(after.Errors) != len(before.Errors) {
		t.Fatalf("observe wrote the state file: %+v then %+v, %v", before.Counts, after.Counts, err)
	}
	if res := b.reconcile(t); res.MissedRecorded != 2 || fmt.Sprint(b.nas.acked) != "[[sch_x sch_y]]" {
		t.Fatalf("the reconcile after: %+v, acked %v", res, b.nas.acked)
	}
}

func TestObserveChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.nas.set(func(n *fakeNAS) { n.arms["ghost"] = armed("ghost", at(time.Hour)) })
	o, err := b.rec.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p := o.Plan; ids(p.Provision) != "a" || ids(p.Cancel) != "ghost" || p.InSync() {
		t.Fatalf("plan %+v", p)
	}
	if ids(o.Desired) != "a" || ids(o.Armed) != "ghost" {
		t.Fatalf("observation %+v", o)
	}
	b.wantArmed(t, map[string]time.Time{"ghost": at(time.Hour)})
	b.nas.mu.Lock()
	calls := map[string]int{}
	for k, v := range b.nas.calls {
		calls[k] = v
	}
	b.nas.mu.Unlock()
	keys := slices.Collect(func(yield func(string) bool) {
		for k := range calls {
			if !yield(k) {
				return
			}
		}
	})
	sort.Strings(keys)
	if strings.Join(keys, ",") != "list" {
		t.Fatalf("calls %v", calls)
	}
}

// blockingNAS holds List until released, to change jobs mid-reconcile.
type blockingNAS struct {
	*fakeNAS
	listing chan struct{}
	release chan struct{}
}

func (n *blockingNAS) List(ctx context.Context) (nasclient.Listing, error) {
	n.listing <- struct{}{}
	<-n.release
	return n.fakeNAS.List(ctx)
}

// A change that arrives during a reconcile keeps the reconciler out of sync
// (so an idle agent does not exit) until a reconcile that saw it.
func TestChangeDuringReconcileIsNotInSync(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	nas := &blockingNAS{fakeNAS: b.nas, listing: make(chan struct{}), release: make(chan struct{})}
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{Source: b.rt, NAS: nas, CallbackURL: callback, Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := rec.Reconcile(context.Background()); done <- err }()
	<-nas.listing
	rec.Kick()
	close(nas.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rec.InSync() {
		t.Fatal("in sync although a change arrived during the reconcile")
	}
	go func() { <-nas.listing }()
	if _, err := rec.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !rec.InSync() {
		t.Fatal("not in sync after a reconcile that saw the change")
	}
}

// TestReconcileCutShortByStopIsNotRecorded: a reconcile whose listing fails
// because the agent is stopping (its context is done) records nothing: the
// last reconcile on record stays the successful one, with no failure
// counted. The same failure with a live context is recorded.
func TestReconcileCutShortByStopIsNotRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	b.reconcile(t)
	before, err := provider.ReadState(b.home)
	if err != nil || before.Last == nil || !before.Last.OK {
		t.Fatalf("state after a reconcile: %+v, %v", before, err)
	}

	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	b.nas.set(func(n *fakeNAS) { n.failNext["list"] = 1 })
	if _, err := b.rec.Reconcile(stopped); !errors.Is(err, context.Canceled) {
		t.Fatalf("reconcile cut short: %v, want context.Canceled", err)
	}
	st, err := provider.ReadState(b.home)
	if err != nil {
		t.Fatal(err)
	}
	if st.Last == nil || !st.Last.OK || st.Counts.Failures != 0 || len(st.Errors) != 0 || st.Counts.Reconciles != before.Counts.Reconciles || !b.rec.InSync() {
		t.Fatalf("state after a reconcile cut short: %+v (in sync %v)", st, b.rec.InSync())
	}

	b.nas.set(func(n *fakeNAS) { n.failNext["list"] = 1 })
	if _, err := b.rec.Reconcile(context.Background()); !errors.Is(err, errNASDown) {
		t.Fatalf("reconcile: %v, want the listing's failure", err)
	}
	st, _ = provider.ReadState(b.home)
	if st.Last == nil || st.Last.OK || st.Counts.Failures != 1 || len(st.Errors) != 1 || st.Errors[0].Op != "list" {
		t.Fatalf("state after a failed listing: %+v", st)
	}
}

// TestRunCostsOneListAndOneProvisionPerFire: under Run, a fire costs NAS
// one list and one provision (the next slot): the other writes of the job
// store around it (the run starting and ending, its ledger lines) change no
// fire to arm and reconcile nothing.
func TestRunCostsOneListAndOneProvisionPerFire(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.rec.Run(ctx, b.rt.Changes()) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !cond() {
			select {
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(time.Millisecond):
			}
		}
	}
	waitFor("the first arm", func() bool { return b.nas.snapshot()["a"].Equal(at(time.Hour)) && b.rec.InSync() })
	const fires = 5
	for i := 1; i <= fires; i++ {
		slot := at(time.Duration(i) * time.Hour)
		b.clock.Set(slot)
		// NAS delivers the fire, then forgets the arm it acknowledged
		// (unless the agent armed the next slot already).
		r, err := b.rt.Fire(ctx, "a", slot, agent.TriggerScheduled)
		if err != nil || r.Status != agent.FireAccepted {
			t.Fatalf("fire %d: %+v %v", i, r, err)
		}
		b.nas.set(func(n *fakeNAS) {
			if n.arms["a"].FireAt.Time.Equal(slot) {
				delete(n.arms, "a")
			}
		})
		waitFor("the run and the next arm", func() bool {
			b.runs.mu.Lock()
			n := b.runs.runs["a"]
			b.runs.mu.Unlock()
			return n == i && b.rt.InFlight() == 0 && b.nas.snapshot()["a"].Equal(slot.Add(time.Hour)) && b.rec.InSync()
		})
	}
	// A last change that does need a reconcile: once it is armed, every
	// change signal before it has been handled.
	b.add(t, "z", "every 1h")
	waitFor("the last job's arm", func() bool { return !b.nas.snapshot()["z"].IsZero() && b.rec.InSync() })
	cancel()
	<-done
	b.nas.mu.Lock()
	lists, provisions := b.nas.calls["list"], b.nas.calls["provision"]
	b.nas.mu.Unlock()
	// One list and one provision for the first arm, each fire, and z; one
	// list more may come of a change that lands while a reconcile runs.
	// (Reconciling on every write of the store made it 13 or 14 lists.)
	if lists > fires+3 || provisions > fires+2 {
		t.Fatalf("%d fires cost %d lists and %d provisions, want at most %d and %d", fires, lists, provisions, fires+3, fires+2)
	}
}

// TestReconcileThatChangesNothingIsDebug: a reconcile that provisions or
// cancels logs "reconciled" at info; one that finds NAS in sync, at debug.
func TestReconcileThatChangesNothingIsDebug(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.add(t, "a", "every 1h")
	var logs bytes.Buffer
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{
		Source: b.rt, NAS: b.nas, CallbackURL: callback, Home: b.home, CatchUp: true, Now: b.clock.Now,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := rec.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var info, debug int
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "msg=reconciled") {
			continue
		}
		switch {
		case strings.Contains(line, "level=INFO") && strings.Contains(line, "provisioned=1"):
			info++
		case strings.Contains(line, "level=DEBUG") && strings.Contains(line, "provisioned=0"):
			debug++
		default:
			t.Errorf("unexpected line %q", line)
		}
	}
	if info != 1 || debug != 2 {
		t.Fatalf("%d info and %d debug reconciled lines, want 1 and 2:\n%s", info, debug, logs.String())
	}
}
