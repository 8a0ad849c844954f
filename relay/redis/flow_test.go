package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
)

// testClock is a clock a test steps by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// flowEngine opens an engine of shards shards on a fresh prefix (or on
// prefix, to share another engine's store), on clock c (nil: Redis's).
func flowEngine(t *testing.T, prefix string, shards int, c *testClock) *Engine {
	t.Helper()
	if prefix == "" {
		prefix = redistest.Prefix(t)
	}
	opts := Options{Prefix: prefix, Shards: shards}
	if c != nil {
		opts.Now = c.Now
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := Open(ctx, redistest.URL(t), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// flowCtx is a context that ends with the test.
func flowCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// armJobs arms jobs j00, j01, ... of agent, job i due at at + i ms.
func armJobs(t *testing.T, e *Engine, agent string, n int, at time.Time) {
	t.Helper()
	for i := range n {
		job := fmt.Sprintf("j%02d", i)
		if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: agent, InstanceID: "i-" + agent, JobID: job,
			FireAt: at.Add(time.Duration(i) * time.Millisecond), ScheduleID: agent + "/" + job}); err != nil {
			t.Fatalf("arm %s/%s: %v", agent, job, err)
		}
	}
}

// claimFlow claims up to max under flow and fails the test on an error.
func claimFlow(t *testing.T, e *Engine, max int, flow relay.Flow) []relay.Lease {
	t.Helper()
	ls, err := e.Claim(flowCtx(t), max, time.Minute, flow)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return ls
}

// jobsOf lists the leases' jobs.
func jobsOf(ls []relay.Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.JobID
	}
	return out
}

// countBy counts leases per agent.
func countBy(ls []relay.Lease) map[string]int {
	n := map[string]int{}
	for _, l := range ls {
		n[l.AgentID]++
	}
	return n
}

// mustFlow reads agent's flow state.
func mustFlow(t *testing.T, e *Engine, agent string) relay.AgentFlow {
	t.Helper()
	f, err := e.AgentFlow(flowCtx(t), agent)
	if err != nil {
		t.Fatalf("agent flow of %s: %v", agent, err)
	}
	return f
}

// mustStats reads the gauges.
func mustStats(t *testing.T, e *Engine) relay.Stats {
	t.Helper()
	st, err := e.Stats(flowCtx(t))
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st
}

func TestFlow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"parallelism bound across two engines", testFlowParallelismAcrossEngines},
		{"held fires come back in due order", testFlowHeldInOrder},
		{"a probe goes out alone until an ack", testFlowProbe},
		{"a Down hold gates the agent and NextDue", testFlowDownHold},
		{"a rate spaces the fires", testFlowRate},
		{"disabled holds, enabling releases", testFlowDisabled},
		{"flexible windows pull forward", testFlowFlexPullForward},
		{"flexible windows are checked", testFlowFlexChecked},
		{"stats count held and probing", testFlowStats},
		{"reap is the safety net", testFlowReapSafetyNet},
		{"reap of a lapsed lease gives room", testFlowReapGivesRoom},
		{"reap recounts the leases in flight", testFlowRecount},
		{"an agent's backlog hides others for a few claims at most", testFlowBacklogFairness},
		{"cancels and re-arms leave the hold", testFlowCancel},
		{"cancel agent keeps the policy", testFlowCancelAgent},
		{"agent flows list agents in id order", testFlowAgentFlows},
		{"policies are checked", testFlowPolicyChecked},
		{"phases are stable and shared", testFlowPhase},
		{"group-committed acks end probes and release", testFlowGroupAcks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

func testFlowParallelismAcrossEngines(t *testing.T) {
	a := flowEngine(t, "", 4, nil)
	b := flowEngine(t, a.Prefix(), 4, nil)
	armJobs(t, a, "busy", 10, time.Now().Add(-time.Minute))
	flow := relay.Flow{Parallelism: 2}
	var held []relay.Lease
	for _, e := range []*Engine{a, b, a, b} {
		held = append(held, claimFlow(t, e, 10, flow)...)
	}
	if got := jobsOf(held); !slices.Equal(got, []string{"j00", "j01"}) {
		t.Fatalf("leased %v over two engines, want j00 j01 (parallelism 2)", got)
	}
	if f := mustFlow(t, b, "busy"); f.InFlight != 2 || f.Held != 8 {
		t.Fatalf("flow %+v, want 2 in flight and 8 held", f)
	}
	// An ack in one engine gives room to a claim of the other.
	if err := a.Ack(flowCtx(t), held[0]); err != nil {
		t.Fatal(err)
	}
	next := claimFlow(t, b, 10, flow)
	if got := jobsOf(next); !slices.Equal(got, []string{"j02"}) {
		t.Fatalf("after an ack: %v, want j02", got)
	}
}

func testFlowHeldInOrder(t *testing.T) {
	e := flowEngine(t, "", 1, nil)
	armJobs(t, e, "a", 8, time.Now().Add(-time.Minute))
	armJobs(t, e, "b", 2, time.Now().Add(-time.Minute))
	flow := relay.Flow{Parallelism: 1}
	var order []string
	for range 20 {
		ls := claimFlow(t, e, 10, flow)
		for _, l := range ls {
			if l.AgentID == "a" {
				order = append(order, l.JobID)
			}
			if l.State != relay.StateLeased {
				t.Fatalf("lease state %s", l.State)
			}
		}
		if n := countBy(ls)["a"]; n > 1 {
			t.Fatalf("claim leased %d of a's fires, parallelism 1", n)
		}
		// A held fire is an armed row.
		if !slices.Contains(order, "j07") {
			if o, err := e.Get(flowCtx(t), "a", "j07"); err != nil || o.State != relay.StateArmed {
				t.Fatalf("held fire: %+v, %v", o, err)
			}
		}
		for _, l := range ls {
			if err := e.Ack(flowCtx(t), l); err != nil {
				t.Fatal(err)
			}
		}
		if len(order) == 8 {
			break
		}
	}
	want := []string{"j00", "j01", "j02", "j03", "j04", "j05", "j06", "j07"}
	if !slices.Equal(order, want) {
		t.Fatalf("a's fires leased in order %v, want %v", order, want)
	}
	if st := mustStats(t, e); st.Armed != 0 || st.Held != 0 {
		t.Fatalf("stats at the end %+v", st)
	}
	if n, _ := e.c.SCard(flowCtx(t), e.k.held(0)).Result(); n != 0 {
		t.Fatalf("held set keeps %d agents with no held fire", n)
	}
}

func testFlowProbe(t *testing.T) {
	e := flowEngine(t, "", 2, nil)
	armJobs(t, e, "a", 6, time.Now().Add(-time.Minute))
	flow := relay.Flow{Parallelism: 3}
	first := claimFlow(t, e, 10, flow)
	if len(first) != 3 || first[0].AgentFailures != 0 {
		t.Fatalf("first claim %v", jobsOf(first))
	}
	for i, l := range first {
		l.AgentFailures = i // the failure count is the highest seen, plus one
		if err := e.Down(flowCtx(t), l, time.Hour, 0, "connection refused"); err != nil {
			t.Fatal(err)
		}
	}
	if f := mustFlow(t, e, "a"); !f.Probing || f.Failures != 3 || f.InFlight != 0 {
		t.Fatalf("after the downs: %+v, want probing, 3 failures, none in flight", f)
	}
	probe := claimFlow(t, e, 10, flow)
	if len(probe) != 1 || probe[0].JobID != "j03" || probe[0].AgentFailures != 3 {
		t.Fatalf("probe %+v, want j03 alone with 3 failures", probe)
	}
	if ls := claimFlow(t, e, 10, flow); len(ls) != 0 {
		t.Fatalf("claim during the probe: %v", jobsOf(ls))
	}
	if err := e.Ack(flowCtx(t), probe[0]); err != nil {
		t.Fatal(err)
	}
	if f := mustFlow(t, e, "a"); f.Probing || f.Failures != 0 || f.Held != 2 {
		// The ack released the held fires into the queue? Held counts
		// those still held back: with room 3 now, none.
		if f.Probing || f.Failures != 0 {
			t.Fatalf("after an ack: %+v, want no probe", f)
		}
	}
	rest := claimFlow(t, e, 10, flow)
	if got := jobsOf(rest); !slices.Equal(got, []string{"j04", "j05"}) {
		t.Fatalf("after the answer: %v, want j04 j05 at full parallelism", got)
	}
	if st := mustStats(t, e); st.Probing != 0 {
		t.Fatalf("probing agents %d", st.Probing)
	}
}

func testFlowDownHold(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(strconv.Itoa(shards)+" shards", func(t *testing.T) { testFlowDownHoldOn(t, shards) })
	}
}

func testFlowDownHoldOn(t *testing.T, shards int) {
	c := newTestClock()
	e := flowEngine(t, "", shards, c)
	armJobs(t, e, "a", 3, c.Now().Add(-time.Second))
	flow := relay.Flow{Parallelism: 4}
	ls := claimFlow(t, e, 1, flow)
	if len(ls) != 1 || ls[0].JobID != "j00" {
		t.Fatalf("first claim %v", jobsOf(ls))
	}
	if err := e.Down(flowCtx(t), ls[0], 10*time.Second, 5*time.Second, "503"); err != nil {
		t.Fatal(err)
	}
	if got := claimFlow(t, e, 10, flow); len(got) != 0 {
		t.Fatalf("claim during the hold: %v", jobsOf(got))
	}
	f := mustFlow(t, e, "a")
	if !f.GateUntil.Equal(c.Now().Add(5*time.Second)) || f.Held != 2 || f.Failures != 1 {
		t.Fatalf("flow during the hold %+v", f)
	}
	wait, ok, err := e.NextDue(flowCtx(t))
	if err != nil || !ok || wait != 5*time.Second {
		t.Fatalf("next due %s %v %v, want the gate in 5s", wait, ok, err)
	}
	c.Advance(4999 * time.Millisecond)
	if got := claimFlow(t, e, 10, flow); len(got) != 0 {
		t.Fatalf("claim just before the gate: %v", jobsOf(got))
	}
	c.Advance(time.Millisecond)
	probe := claimFlow(t, e, 10, flow)
	if got := jobsOf(probe); !slices.Equal(got, []string{"j01"}) {
		t.Fatalf("at the gate: %v, want the probe j01", got)
	}
	if mustFlow(t, e, "a").Held != 1 {
		t.Fatal("the rest is not held")
	}
	wait, ok, err = e.NextDue(flowCtx(t))
	if err != nil || !ok || wait != 5*time.Second {
		t.Fatalf("next due %s %v %v, want the failed fire's retry in 5s", wait, ok, err)
	}
}

func testFlowRate(t *testing.T) {
	c := newTestClock()
	e := flowEngine(t, "", 1, c)
	armJobs(t, e, "a", 4, c.Now().Add(-time.Second))
	flow := relay.Flow{Rate: 3} // 333.333ms apart
	if got := claimFlow(t, e, 10, flow); len(got) != 1 {
		t.Fatalf("leases at once %d, want 1", len(got))
	}
	tat, err := e.c.HGet(flowCtx(t), e.k.agent(0, "a"), "tat").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatInt(c.Now().UnixMilli()+333, 10) + ".333"; tat != want {
		t.Fatalf("rate slot %q, want %q (a fraction kept)", tat, want)
	}
	wait, ok, err := e.NextDue(flowCtx(t))
	if err != nil || !ok || wait != 334*time.Millisecond {
		t.Fatalf("next due %s %v %v, want the next slot", wait, ok, err)
	}
	c.Advance(333 * time.Millisecond)
	if got := claimFlow(t, e, 10, flow); len(got) != 0 {
		t.Fatalf("leases before the slot: %v", jobsOf(got))
	}
	c.Advance(time.Millisecond)
	if got := jobsOf(claimFlow(t, e, 10, flow)); !slices.Equal(got, []string{"j01"}) {
		t.Fatalf("at the slot: %v", got)
	}
	// The slots keep their fractions: the third is at 667.333ms (the claim
	// came at 334), not 668.
	c.Advance(333 * time.Millisecond)
	if got := claimFlow(t, e, 10, flow); len(got) != 0 {
		t.Fatalf("leases before the third slot: %v", jobsOf(got))
	}
	c.Advance(time.Millisecond)
	if got := jobsOf(claimFlow(t, e, 10, flow)); !slices.Equal(got, []string{"j02"}) {
		t.Fatalf("at the third slot: %v", got)
	}
	// An agent's own rate goes over the flow's.
	if err := e.SetAgentPolicy(flowCtx(t), "a", relay.AgentPolicy{Rate: 1000}); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	if got := jobsOf(claimFlow(t, e, 10, flow)); !slices.Equal(got, []string{"j03"}) {
		t.Fatalf("under the agent's rate: %v", got)
	}
}

func testFlowDisabled(t *testing.T) {
	e := flowEngine(t, "", 3, nil)
	at := time.Now().Add(-time.Minute)
	armJobs(t, e, "off", 4, at)
	armJobs(t, e, "on", 1, at)
	if err := e.SetAgentPolicy(flowCtx(t), "off", relay.AgentPolicy{Disabled: true}); err != nil {
		t.Fatal(err)
	}
	ls := claimFlow(t, e, 10, relay.Flow{})
	if got := countBy(ls); got["off"] != 0 || got["on"] != 1 {
		t.Fatalf("leases %v", got)
	}
	if f := mustFlow(t, e, "off"); f.Held != 4 || !f.Policy.Disabled {
		t.Fatalf("flow of the disabled agent %+v", f)
	}
	if _, ok, err := e.NextDue(flowCtx(t)); err != nil || ok {
		t.Fatalf("next due with only a disabled agent's fires: %v %v", ok, err)
	}
	w := e.Wake()
	if err := e.SetAgentPolicy(flowCtx(t), "off", relay.AgentPolicy{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatal("enabling did not wake the dispatchers")
	}
	if got := jobsOf(claimFlow(t, e, 10, relay.Flow{})); !slices.Equal(got, []string{"j00", "j01", "j02", "j03"}) {
		t.Fatalf("after enabling: %v, want every held fire in order", got)
	}
	flows, err := e.AgentFlows(flowCtx(t))
	if err != nil || len(flows) != 0 {
		t.Fatalf("agent flows after the policy went: %+v, %v", flows, err)
	}
}

func testFlowFlexPullForward(t *testing.T) {
	c := newTestClock()
	e := flowEngine(t, "", 1, c)
	fireAt := c.Now().Add(-time.Second)
	flex := 10 * time.Minute
	arm := func(agent, job string, due time.Time) {
		t.Helper()
		if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: agent, JobID: job, FireAt: fireAt, Flex: flex, DueAt: due,
			ScheduleID: agent + "/" + job}); err != nil {
			t.Fatal(err)
		}
	}
	arm("a", "early", fireAt)
	arm("a", "late", fireAt.Add(5*time.Minute))
	arm("b", "other", fireAt.Add(5*time.Minute))
	// Its window opens in an hour: not pulled.
	if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "a", JobID: "not-open", FireAt: c.Now().Add(time.Hour), Flex: flex,
		ScheduleID: "again"}); err != nil {
		t.Fatal(err)
	}
	o, err := e.Get(flowCtx(t), "a", "late")
	if err != nil || o.Flex != flex || !o.DueAt.Equal(fireAt.Add(5*time.Minute)) || !o.FireAt.Equal(fireAt) {
		t.Fatalf("spread fire %+v, %v", o, err)
	}
	// One claim: the lease of early pulls late forward, and the claim goes
	// on to take it.
	ls := claimFlow(t, e, 10, relay.Flow{})
	if got := jobsOf(ls); !slices.Equal(got, []string{"early", "late"}) {
		t.Fatalf("leased %v, want early then late, pulled forward", got)
	}
	if ls[0].Flex != flex {
		t.Fatalf("lease's flex %s", ls[0].Flex)
	}
	if !ls[1].DueAt.Equal(c.Now()) {
		t.Fatalf("pulled fire due %s, want now", ls[1].DueAt)
	}
	for _, job := range []string{"other", "not-open"} {
		agent := "a"
		if job == "other" {
			agent = "b"
		}
		o, err := e.Get(flowCtx(t), agent, job)
		if err != nil || o.State != relay.StateArmed || !o.DueAt.After(c.Now()) {
			t.Fatalf("%s: %+v, %v; want still armed, due later", job, o, err)
		}
	}
	// Leased fires leave the agent's flexible index; a re-arm without a
	// window leaves it too.
	if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "a", JobID: "not-open", FireAt: c.Now().Add(time.Hour), ScheduleID: "plain"}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.c.ZCard(flowCtx(t), e.k.flexOf(0, "a")).Result(); err != nil || n != 0 {
		t.Fatalf("a's flexible index holds %d, %v", n, err)
	}
	for _, l := range ls {
		if err := e.Ack(flowCtx(t), l); err != nil {
			t.Fatalf("ack of %s: %v", l.JobID, err)
		}
	}
}

func testFlowFlexChecked(t *testing.T) {
	e := flowEngine(t, "", 1, nil)
	fireAt := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for _, tc := range []struct {
		name string
		flex time.Duration
		due  time.Time
	}{
		{"due before fire_at", time.Minute, fireAt.Add(-time.Millisecond)},
		{"due after the window", time.Minute, fireAt.Add(time.Minute + time.Millisecond)},
		{"negative window", -time.Minute, time.Time{}},
		{"window over the widest", relay.MaxFlex + time.Millisecond, time.Time{}},
	} {
		if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "a", JobID: "j", FireAt: fireAt, Flex: tc.flex, DueAt: tc.due,
			ScheduleID: "s"}); err == nil {
			t.Fatalf("%s: arm accepted", tc.name)
		}
	}
	arm := func(flex time.Duration, due time.Time, id string) relay.ArmResult {
		t.Helper()
		res, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "a", JobID: "j", FireAt: fireAt, Flex: flex, DueAt: due, ScheduleID: id})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	arm(0, time.Time{}, "s1")
	if res := arm(time.Minute, fireAt.Add(time.Minute), "s2"); !res.Changed || res.Replaced != "s1" || !res.OneShot.DueAt.Equal(fireAt.Add(time.Minute)) {
		t.Fatalf("a new window: %+v", res)
	}
	if res := arm(time.Minute, fireAt.Add(30*time.Second), "s3"); res.Changed || res.OneShot.ScheduleID != "s2" {
		t.Fatalf("the same window again: %+v", res)
	}
	// A due time within the window with a sub-millisecond part is rounded up.
	res := arm(2*time.Minute, fireAt.Add(time.Minute+time.Microsecond), "s4")
	if !res.Changed || !res.OneShot.DueAt.Equal(fireAt.Add(time.Minute).Truncate(time.Millisecond).Add(time.Millisecond)) {
		t.Fatalf("sub-millisecond due: %+v", res.OneShot)
	}
}

func testFlowStats(t *testing.T) {
	e := flowEngine(t, "", 4, nil)
	at := time.Now().Add(-time.Minute)
	for i := range 6 {
		armJobs(t, e, "agent-"+strconv.Itoa(i), 3, at)
	}
	ls := claimFlow(t, e, 100, relay.Flow{Parallelism: 1})
	if len(ls) != 6 {
		t.Fatalf("leases %d, want one per agent", len(ls))
	}
	if err := e.Down(flowCtx(t), ls[0], time.Hour, time.Minute, "refused"); err != nil {
		t.Fatal(err)
	}
	st := mustStats(t, e)
	if st.Held != 12 || st.Armed != 18 || st.Leased != 5 || st.Due != 0 || st.Probing != 1 {
		t.Fatalf("stats %+v, want 12 held, 18 armed, 5 leased, none due (the downed one in an hour), 1 probing", st)
	}
}

func testFlowReapSafetyNet(t *testing.T) {
	e := flowEngine(t, "", 1, nil)
	armJobs(t, e, "a", 3, time.Now().Add(-time.Minute))
	ls := claimFlow(t, e, 10, relay.Flow{Parallelism: 1})
	if len(ls) != 1 {
		t.Fatalf("leases %d", len(ls))
	}
	// The lease ends without a release (as a process of an earlier version
	// would end it): nothing gives the held fires their turn but the reap.
	if err := e.c.ZRem(flowCtx(t), e.k.lease(0), member("a", ls[0].JobID)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.HDel(flowCtx(t), e.k.inFlight(0), "a").Err(); err != nil {
		t.Fatal(err)
	}
	if got := claimFlow(t, e, 10, relay.Flow{Parallelism: 1}); len(got) != 0 {
		t.Fatalf("claim before the reap: %v", jobsOf(got))
	}
	w := e.Wake()
	if n, err := e.Reap(flowCtx(t)); err != nil || n != 0 {
		t.Fatalf("reap: %d, %v", n, err)
	}
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatal("the release did not wake the dispatchers")
	}
	if got := jobsOf(claimFlow(t, e, 10, relay.Flow{Parallelism: 1})); !slices.Equal(got, []string{"j01"}) {
		t.Fatalf("after the reap: %v, want j01", got)
	}
}

// testFlowRecount breaks the in-flight counts as a lost update would (one
// agent counted at its bound with nothing in flight, another at none with
// two leases, a third that has no lease at all) and checks that Reap puts
// them right: the first agent's held fires go out, the second's stay held.
func testFlowRecount(t *testing.T) {
	e := flowEngine(t, "", 1, nil)
	at := time.Now().Add(-time.Minute)
	armJobs(t, e, "stuck", 3, at)
	armJobs(t, e, "loose", 3, at)
	flow := relay.Flow{Parallelism: 2}
	ls := claimFlow(t, e, 10, flow)
	if n := perAgentLeases(ls); n["stuck"] != 2 || n["loose"] != 2 {
		t.Fatalf("leases %v, want two per agent", n)
	}
	for _, l := range ls {
		if l.AgentID == "stuck" {
			if err := e.Ack(flowCtx(t), l); err != nil {
				t.Fatal(err)
			}
		}
	}
	inf := e.k.inFlight(0)
	if err := e.c.HSet(flowCtx(t), inf, "stuck", 2, "loose", 0, "gone", 7).Err(); err != nil {
		t.Fatal(err)
	}
	if got := claimFlow(t, e, 10, flow); len(got) != 0 {
		t.Fatalf("claim with the counts broken: %v", jobsOf(got))
	}
	e.recounted[0].Store(0) // as a process that has not recounted yet
	if _, err := e.Reap(flowCtx(t)); err != nil {
		t.Fatal(err)
	}
	counts, err := e.c.HGetAll(flowCtx(t), inf).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"loose": "2"}; !maps.Equal(counts, want) {
		t.Fatalf("counts after the recount %v, want %v", counts, want)
	}
	if got := jobsOf(claimFlow(t, e, 10, flow)); !slices.Equal(got, []string{"j02"}) {
		t.Fatalf("after the recount: %v, want the stuck agent's j02 alone", got)
	}
	if f := mustFlow(t, e, "loose"); f.InFlight != 2 || f.Held != 1 {
		t.Fatalf("loose agent %+v, want 2 in flight, 1 held", f)
	}
}

// perAgentLeases counts leases by agent.
func perAgentLeases(ls []relay.Lease) map[string]int {
	n := map[string]int{}
	for _, l := range ls {
		n[l.AgentID]++
	}
	return n
}

func testFlowReapGivesRoom(t *testing.T) {
	c := newTestClock()
	e := flowEngine(t, "", 1, c)
	armJobs(t, e, "a", 3, c.Now().Add(-time.Minute))
	ls := claimFlow(t, e, 10, relay.Flow{Parallelism: 2})
	if len(ls) != 2 {
		t.Fatalf("leases %d", len(ls))
	}
	c.Advance(2 * time.Minute)
	// A lapsed lease counts until the reap ends it: its fire comes back
	// only then, as the room it held does.
	if f := mustFlow(t, e, "a"); f.InFlight != 2 {
		t.Fatalf("lapsed leases before the reap: %+v, want 2 in flight", f)
	}
	if n, err := e.Reap(flowCtx(t)); err != nil || n != 2 {
		t.Fatalf("reap: %d, %v", n, err)
	}
	got := claimFlow(t, e, 10, relay.Flow{Parallelism: 2})
	if len(got) != 2 || mustFlow(t, e, "a").Held != 1 {
		t.Fatalf("after the reap: %v, %+v", jobsOf(got), mustFlow(t, e, "a"))
	}
	for _, l := range ls {
		if err := e.Ack(flowCtx(t), l); !errors.Is(err, relay.ErrLeaseLost) {
			t.Fatalf("ack of a reaped lease: %v", err)
		}
	}
	if f := mustFlow(t, e, "a"); f.InFlight != 2 {
		t.Fatalf("an ack of a lost lease touched the in-flight leases: %+v", f)
	}
}

func testFlowBacklogFairness(t *testing.T) {
	e := flowEngine(t, "", 1, nil)
	at := time.Now().Add(-time.Hour)
	for i := range 1000 {
		job := fmt.Sprintf("j%04d", i)
		if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "busy", JobID: job, FireAt: at.Add(time.Duration(i) * time.Millisecond),
			ScheduleID: "busy/" + job}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "quiet", JobID: "q", FireAt: time.Now().Add(-time.Second), ScheduleID: "quiet/q"}); err != nil {
		t.Fatal(err)
	}
	flow := relay.Flow{Parallelism: 4}
	got := map[string]int{}
	calls := 0
	for got["quiet"] == 0 && calls < 6 {
		calls++
		for a, n := range countBy(claimFlow(t, e, 1, flow)) {
			got[a] += n
		}
	}
	if got["quiet"] != 1 || got["busy"] != 4 {
		t.Fatalf("after %d claims of one: %v; want busy's 4, then quiet's", calls, got)
	}
	if f := mustFlow(t, e, "busy"); f.Held != 996 {
		t.Fatalf("busy's held fires %d", f.Held)
	}
}

func testFlowCancel(t *testing.T) {
	e := flowEngine(t, "", 1, nil)
	at := time.Now().Add(-time.Minute)
	armJobs(t, e, "a", 4, at)
	flow := relay.Flow{Parallelism: 1}
	ls := claimFlow(t, e, 10, flow)
	if len(ls) != 1 || mustFlow(t, e, "a").Held != 3 {
		t.Fatalf("leases %v", jobsOf(ls))
	}
	if ok, err := e.Cancel(flowCtx(t), "a", "j03"); err != nil || !ok {
		t.Fatalf("cancel of a held fire: %v %v", ok, err)
	}
	if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "a", JobID: "j02", FireAt: at.Add(time.Hour), ScheduleID: "later"}); err != nil {
		t.Fatal(err)
	}
	if f := mustFlow(t, e, "a"); f.Held != 1 {
		t.Fatalf("held after cancelling and re-arming held fires: %+v", f)
	}
	// Re-arming the leased fire ends its lease: the held one goes out.
	if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "a", JobID: ls[0].JobID, FireAt: at.Add(time.Hour), ScheduleID: "later-0"}); err != nil {
		t.Fatal(err)
	}
	if got := jobsOf(claimFlow(t, e, 10, flow)); !slices.Equal(got, []string{"j01"}) {
		t.Fatalf("after re-arming the leased fire: %v", got)
	}
	if st := mustStats(t, e); st.Held != 0 || st.Armed != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func testFlowCancelAgent(t *testing.T) {
	e := flowEngine(t, "", 1, nil)
	at := time.Now().Add(-time.Minute)
	armJobs(t, e, "a", 4, at)
	if _, err := e.Arm(flowCtx(t), relay.ArmRequest{AgentID: "a", JobID: "flex", FireAt: at, Flex: time.Hour, DueAt: at.Add(30 * time.Minute),
		ScheduleID: "flex"}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetAgentPolicy(flowCtx(t), "a", relay.AgentPolicy{Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	if ls := claimFlow(t, e, 10, relay.Flow{}); len(ls) != 1 {
		t.Fatalf("leases %v", jobsOf(ls))
	}
	if n, err := e.CancelAgent(flowCtx(t), "a"); err != nil || n != 5 {
		t.Fatalf("cancel agent: %d, %v", n, err)
	}
	for _, k := range []string{e.k.heldOf(0, "a"), e.k.flexOf(0, "a"), e.k.rows(0, "a")} {
		if n, _ := e.c.Exists(flowCtx(t), k).Result(); n != 0 {
			t.Fatalf("%s is left", k)
		}
	}
	if ok, _ := e.c.HExists(flowCtx(t), e.k.inFlight(0), "a").Result(); ok {
		t.Fatal("the agent's count of leases in flight is left")
	}
	if n, _ := e.c.SCard(flowCtx(t), e.k.held(0)).Result(); n != 0 {
		t.Fatal("the agent is left in the held set")
	}
	if f := mustFlow(t, e, "a"); f.Policy != (relay.AgentPolicy{Parallelism: 1}) || f.Held != 0 || f.InFlight != 0 {
		t.Fatalf("flow after cancel agent %+v, want the policy kept", f)
	}
}

func testFlowAgentFlows(t *testing.T) {
	e := flowEngine(t, "", 4, nil)
	at := time.Now().Add(-time.Minute)
	armJobs(t, e, "held", 3, at)
	armJobs(t, e, "down", 1, at)
	if err := e.SetAgentPolicy(flowCtx(t), "policy", relay.AgentPolicy{Rate: 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetAgentPolicy(flowCtx(t), "gone", relay.AgentPolicy{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetAgentPolicy(flowCtx(t), "gone", relay.AgentPolicy{}); err != nil {
		t.Fatal(err)
	}
	for _, l := range claimFlow(t, e, 10, relay.Flow{Parallelism: 1}) {
		if l.AgentID == "down" {
			if err := e.Down(flowCtx(t), l, time.Hour, 0, "refused"); err != nil {
				t.Fatal(err)
			}
		}
	}
	flows, err := e.AgentFlows(flowCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range flows {
		ids = append(ids, f.AgentID)
	}
	if !slices.Equal(ids, []string{"down", "held", "policy"}) {
		t.Fatalf("agent flows of %v", ids)
	}
	if f := flows[0]; !f.Probing || f.Failures != 1 {
		t.Fatalf("down: %+v", f)
	}
	if f := flows[1]; f.Held != 2 || f.InFlight != 1 {
		t.Fatalf("held: %+v", f)
	}
	if f := flows[2]; f.Policy != (relay.AgentPolicy{Rate: 0.5}) {
		t.Fatalf("policy: %+v", f)
	}
	if f := mustFlow(t, e, "nobody"); f != (relay.AgentFlow{AgentID: "nobody"}) {
		t.Fatalf("an unknown agent: %+v", f)
	}
}

func testFlowPolicyChecked(t *testing.T) {
	e := flowEngine(t, "", 1, nil)
	if err := e.SetAgentPolicy(flowCtx(t), "a", relay.AgentPolicy{Parallelism: 2, Rate: 1.5}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []relay.AgentPolicy{{Parallelism: -1}, {Rate: -2}, {Rate: math.NaN()}, {Rate: math.Inf(1)}} {
		if err := e.SetAgentPolicy(flowCtx(t), "a", p); !errors.Is(err, relay.ErrInvalidPolicy) {
			t.Fatalf("policy %+v: %v", p, err)
		}
	}
	if err := e.SetAgentPolicy(flowCtx(t), "", relay.AgentPolicy{}); !errors.Is(err, relay.ErrInvalidPolicy) {
		t.Fatalf("an empty agent id: %v", err)
	}
	if f := mustFlow(t, e, "a"); f.Policy != (relay.AgentPolicy{Parallelism: 2, Rate: 1.5}) {
		t.Fatalf("policy after refused ones %+v", f.Policy)
	}
	if _, err := e.Claim(flowCtx(t), 1, time.Minute, relay.Flow{Parallelism: -1}); err == nil {
		t.Fatal("a claim with a negative parallelism")
	}
}

func testFlowPhase(t *testing.T) {
	a := flowEngine(t, "", 4, nil)
	b := flowEngine(t, a.Prefix(), 4, nil)
	seen := map[float64]bool{}
	for i := range 8 {
		agent := "agent-" + strconv.Itoa(i)
		e, other := a, b
		if i%2 == 1 {
			e, other = b, a
		}
		p, err := e.AgentPhase(flowCtx(t), agent)
		if err != nil || p <= 0 || p >= 1 || seen[p] {
			t.Fatalf("phase of %s: %v, %v", agent, p, err)
		}
		seen[p] = true
		if q, err := other.AgentPhase(flowCtx(t), agent); err != nil || q != p {
			t.Fatalf("phase of %s in the other engine: %v, %v; want %v", agent, q, err, p)
		}
		// The phase lives in the store: forget the cache and read it back.
		e.phases.Delete(agent)
		if q, err := e.AgentPhase(flowCtx(t), agent); err != nil || q != p {
			t.Fatalf("phase of %s read back: %v, %v", agent, q, err)
		}
	}
	for i := range 8 {
		if !seen[relay.VanDerCorput(uint64(i+1))] {
			t.Fatalf("phases %v are not the first 8 of the sequence", seen)
		}
	}
}

func testFlowGroupAcks(t *testing.T) {
	e := flowEngine(t, "", 2, nil)
	at := time.Now().Add(-time.Minute)
	flow := relay.Flow{Parallelism: 2}
	var agents []string
	for i := range 8 {
		agent := "agent-" + strconv.Itoa(i)
		agents = append(agents, agent)
		armJobs(t, e, agent, 5, at)
	}
	ls := claimFlow(t, e, 100, flow)
	if len(ls) != 16 {
		t.Fatalf("leases %d", len(ls))
	}
	// Down one lease of each agent; the rest are acked concurrently (a
	// group commit), which ends every probe and releases held fires.
	var acks []relay.Lease
	downed := map[string]bool{}
	for _, l := range ls {
		if !downed[l.AgentID] {
			downed[l.AgentID] = true
			if err := e.Down(flowCtx(t), l, time.Hour, 0, "refused"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		acks = append(acks, l)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(acks))
	for _, l := range acks {
		wg.Go(func() {
			errs <- e.AckRecord(flowCtx(t), l, relay.LastFire{AgentID: l.AgentID, InstanceID: l.InstanceID, JobID: l.JobID,
				ScheduleID: l.ScheduleID, FireAt: l.FireAt, Outcome: relay.LastFireDelivered, At: time.Now()})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := mustStats(t, e); st.Probing != 0 || st.Leased != 0 {
		t.Fatalf("stats after the acks %+v", st)
	}
	next := countBy(claimFlow(t, e, 100, flow))
	for _, a := range agents {
		if next[a] != 2 {
			t.Fatalf("leases after the acks %v, want 2 of each agent", next)
		}
	}
}

// TestFlowOnACluster runs the flow transitions on a three-node Redis
// Cluster, with shards on every node: every script keeps to its shard's
// slot, and the reads that span shards (Stats, AgentFlows, NextDue) reach
// every node.
func TestFlowOnACluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	ctx := flowCtx(t)
	e, err := Open(ctx, cluster.URL()+"&prefix=flow&shards=16", Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	at := time.Now().Add(-time.Minute)
	var agents []string
	for i := range 12 {
		agent := "agent-" + strconv.Itoa(i)
		agents = append(agents, agent)
		armJobs(t, e, agent, 3, at)
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: agent, JobID: "flex", FireAt: at, Flex: time.Hour,
			DueAt: at.Add(30 * time.Minute), ScheduleID: agent + "/flex"}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.AgentPhase(ctx, agent); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetAgentPolicy(ctx, agents[0], relay.AgentPolicy{Disabled: true}); err != nil {
		t.Fatal(err)
	}
	flow := relay.Flow{Parallelism: 1, Rate: 1000}
	ls := claimFlow(t, e, 100, flow)
	if len(ls) != 11 {
		t.Fatalf("leases %d, want one per enabled agent", len(ls))
	}
	for i, l := range ls {
		if i%2 == 0 {
			err = e.Down(ctx, l, time.Hour, time.Millisecond, "refused")
		} else {
			err = e.Ack(ctx, l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.NextDue(ctx); err != nil {
		t.Fatal(err)
	}
	st := mustStats(t, e)
	if st.Armed != 48-5 || st.Probing != 6 || st.Held == 0 {
		t.Fatalf("stats %+v", st)
	}
	flows, err := e.AgentFlows(ctx)
	if err != nil || len(flows) != 12 {
		t.Fatalf("agent flows: %d, %v", len(flows), err)
	}
	time.Sleep(5 * time.Millisecond) // the hold passes
	if got := claimFlow(t, e, 100, flow); len(got) == 0 {
		t.Fatal("nothing claimed after the acks and the hold")
	}
	for _, a := range agents {
		if _, err := e.CancelAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Cancel(ctx, a, "j00"); err != nil {
			t.Fatal(err)
		}
	}
	if st := mustStats(t, e); st.Armed != 0 || st.Held != 0 {
		t.Fatalf("stats after cancelling everything %+v", st)
	}
}
