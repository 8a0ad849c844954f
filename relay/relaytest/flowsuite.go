package relaytest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// flowTests check flow control (relay.Flow) on the engine's real clock.
var flowTests = []engineTest{
	{"FlowParallelismHoldsInStore", testFlowParallelismHoldsInStore},
	{"FlowClaimIsFairAcrossAgents", testFlowClaimIsFairAcrossAgents},
	{"FlowPolicyOverridesDefault", testFlowPolicyOverridesDefault},
	{"FlowInvalidPolicyChangesNothing", testFlowInvalidPolicyChangesNothing},
	{"FlowDisabledHoldsUntilEnabled", testFlowDisabledHoldsUntilEnabled},
	{"FlowDownProbesOneAtATime", testFlowDownProbesOneAtATime},
	{"FlowCancelOfHeldFire", testFlowCancelOfHeldFire},
	{"FlowReapReturnsRoom", testFlowReapReturnsRoom},
	{"FlowFlexibleWindowPullsForward", testFlowFlexibleWindowPullsForward},
	{"FlowFlexibleWindowChecked", testFlowFlexibleWindowChecked},
	{"FlowAgentPhaseStable", testFlowAgentPhaseStable},
}

// flowClockTests check the timed parts of flow control on a fake clock.
var flowClockTests = []struct {
	name string
	run  func(t *testing.T, e relay.Engine, c *Clock)
}{
	{"FlowDownHoldsTheAgent", testFlowDownHoldsTheAgent},
	{"FlowRateSpacesFires", testFlowRateSpacesFires},
}

// flowClaim claims up to max under flow.
func flowClaim(t *testing.T, e relay.Engine, max int, flow relay.Flow) []relay.Lease {
	t.Helper()
	ls, err := e.Claim(ctxT(t), max, time.Minute, flow)
	noErr(t, err, "claim")
	return ls
}

// flowOf reads agent's flow state.
func flowOf(t *testing.T, e relay.Engine, agent string) relay.AgentFlow {
	t.Helper()
	f, err := e.AgentFlow(ctxT(t), agent)
	noErr(t, err, "agent flow of "+agent)
	return f
}

// armN arms n jobs of agent due at at, named j00, j01, ...
func armN(t *testing.T, e relay.Engine, agent string, n int, at time.Time) {
	t.Helper()
	for i := range n {
		arm(t, e, agent, fmt.Sprintf("j%02d", i), at)
	}
}

// perAgent counts leases by agent.
func perAgent(ls []relay.Lease) map[string]int {
	n := map[string]int{}
	for _, l := range ls {
		n[l.AgentID]++
	}
	return n
}

func testFlowParallelismHoldsInStore(t *testing.T, e relay.Engine) {
	at := now().Add(-time.Second)
	armN(t, e, "a1", 10, at)
	flow := relay.Flow{Parallelism: 3}
	first := flowClaim(t, e, 10, flow)
	equal(t, len(first), 3, "leases of the first claim (the agent's parallelism)")
	f := flowOf(t, e, "a1")
	equal(t, f.InFlight, 3, "in flight")
	equal(t, f.Held, 7, "held")
	s := stats(t, e)
	equal(t, s.Held, int64(7), "stats held")
	equal(t, s.Armed, int64(10), "stats armed (held fires stay armed)")
	equal(t, len(flowClaim(t, e, 10, flow)), 0, "leases while the agent is at its parallelism")
	// A held fire is an armed row like any other.
	got, err := e.Get(ctxT(t), "a1", "j09")
	noErr(t, err, "get a held fire")
	equal(t, got.State, relay.StateArmed, "state of a held fire")
	// Each ended lease gives room for one more, in due order.
	noErr(t, e.Ack(ctxT(t), first[0]), "ack")
	noErr(t, e.Nack(ctxT(t), first[1], time.Hour, "later"), "nack")
	next := flowClaim(t, e, 10, flow)
	equal(t, len(next), 2, "leases after an ack and a nack")
	seen := map[string]bool{}
	for _, l := range append(first, next...) {
		if seen[l.JobID] {
			t.Fatalf("job %s leased twice", l.JobID)
		}
		seen[l.JobID] = true
	}
	for _, j := range []string{"j03", "j04"} {
		if !seen[j] {
			t.Fatalf("leased %v; want the held fires back in due order (j03, j04 next)", seen)
		}
	}
}

func testFlowClaimIsFairAcrossAgents(t *testing.T, e relay.Engine) {
	// A busy agent's 200 due fires sort ahead of a quiet agent's 4 at the
	// same instant; the quiet agent's fires must come out within a few
	// claims, and the busy agent never get more than its parallelism.
	at := now().Add(-time.Second)
	armN(t, e, "a-busy", 200, at)
	armN(t, e, "z-quiet", 4, at)
	flow := relay.Flow{Parallelism: 4}
	got := map[string]int{}
	for range 20 {
		for a, n := range perAgent(flowClaim(t, e, 16, flow)) {
			got[a] += n
		}
		if got["z-quiet"] == 4 {
			break
		}
	}
	equal(t, got["z-quiet"], 4, "quiet agent's fires leased")
	equal(t, got["a-busy"], 4, "busy agent's fires leased (its parallelism)")
	equal(t, flowOf(t, e, "a-busy").Held, 196, "busy agent's held fires")
}

func testFlowPolicyOverridesDefault(t *testing.T, e relay.Engine) {
	at := now().Add(-time.Second)
	armN(t, e, "a1", 6, at)
	armN(t, e, "a2", 6, at)
	noErr(t, e.SetAgentPolicy(ctxT(t), "a1", relay.AgentPolicy{Parallelism: 1}), "set policy")
	got := perAgent(flowClaim(t, e, 20, relay.Flow{Parallelism: 4}))
	equal(t, got["a1"], 1, "a1's leases (its own parallelism)")
	equal(t, got["a2"], 4, "a2's leases (the default)")
	equal(t, flowOf(t, e, "a1").Policy, relay.AgentPolicy{Parallelism: 1}, "a1's policy")
	flows, err := e.AgentFlows(ctxT(t))
	noErr(t, err, "agent flows")
	if len(flows) != 2 || flows[0].AgentID != "a1" || flows[1].AgentID != "a2" {
		t.Fatalf("agent flows %+v: want a1 (policy, held) and a2 (held), in id order", flows)
	}
	// Removing the policy gives a1 the default again.
	noErr(t, e.SetAgentPolicy(ctxT(t), "a1", relay.AgentPolicy{}), "clear policy")
	equal(t, perAgent(flowClaim(t, e, 20, relay.Flow{Parallelism: 4}))["a1"], 3, "a1's leases after its policy went")
}

func testFlowInvalidPolicyChangesNothing(t *testing.T, e relay.Engine) {
	noErr(t, e.SetAgentPolicy(ctxT(t), "a1", relay.AgentPolicy{Parallelism: 2}), "set policy")
	for _, p := range []relay.AgentPolicy{{Parallelism: -1}, {Rate: -1}} {
		err := e.SetAgentPolicy(ctxT(t), "a1", p)
		if !errors.Is(err, relay.ErrInvalidPolicy) {
			t.Fatalf("SetAgentPolicy(%+v) = %v, want ErrInvalidPolicy", p, err)
		}
	}
	equal(t, flowOf(t, e, "a1").Policy, relay.AgentPolicy{Parallelism: 2}, "policy after refused changes")
}

func testFlowDisabledHoldsUntilEnabled(t *testing.T, e relay.Engine) {
	at := now().Add(-time.Second)
	armN(t, e, "a1", 5, at)
	armN(t, e, "a2", 1, at)
	noErr(t, e.SetAgentPolicy(ctxT(t), "a1", relay.AgentPolicy{Disabled: true}), "disable")
	first := flowClaim(t, e, 20, relay.Flow{})
	got := perAgent(first)
	equal(t, got["a1"], 0, "leases of a disabled agent")
	equal(t, got["a2"], 1, "leases of another agent")
	noErr(t, e.Ack(ctxT(t), first[0]), "ack a2's fire")
	equal(t, flowOf(t, e, "a1").Held, 5, "held fires of the disabled agent")
	// Arming while disabled is kept too.
	arm(t, e, "a1", "late", at)
	equal(t, len(flowClaim(t, e, 20, relay.Flow{})), 0, "leases while disabled")
	// Disabled stays, whatever the parallelism.
	noErr(t, e.SetAgentPolicy(ctxT(t), "a1", relay.AgentPolicy{Disabled: true, Parallelism: 2}), "change a disabled agent's policy")
	equal(t, len(flowClaim(t, e, 20, relay.Flow{})), 0, "leases while still disabled")
	noErr(t, e.SetAgentPolicy(ctxT(t), "a1", relay.AgentPolicy{Parallelism: 2}), "enable")
	var leased []relay.Lease
	for range 10 {
		ls := flowClaim(t, e, 20, relay.Flow{})
		leased = append(leased, ls...)
		for _, l := range ls {
			noErr(t, e.Ack(ctxT(t), l), "ack")
		}
		if len(leased) == 6 {
			break
		}
	}
	equal(t, len(leased), 6, "fires delivered after enabling (none lost)")
	equal(t, stats(t, e).Armed, int64(0), "armed at the end")
}

func testFlowDownProbesOneAtATime(t *testing.T, e relay.Engine) {
	at := now().Add(-time.Second)
	armN(t, e, "a1", 6, at)
	flow := relay.Flow{Parallelism: 4}
	first := flowClaim(t, e, 10, flow)
	equal(t, len(first), 4, "first leases")
	equal(t, first[0].AgentFailures, 0, "failures before any")
	for _, l := range first {
		noErr(t, e.Down(ctxT(t), l, time.Hour, 0, "connection refused"), "down")
	}
	f := flowOf(t, e, "a1")
	if !f.Probing || f.Failures != 1 {
		t.Fatalf("after failed deliveries: %+v, want probing with 1 failure", f)
	}
	equal(t, stats(t, e).Probing, int64(1), "agents probing")
	probe := flowClaim(t, e, 10, flow)
	equal(t, len(probe), 1, "leases while probing (one probe)")
	equal(t, probe[0].AgentFailures, 1, "the probe's failure count")
	equal(t, len(flowClaim(t, e, 10, flow)), 0, "leases while the probe is in flight")
	noErr(t, e.Down(ctxT(t), probe[0], time.Hour, 0, "still refused"), "down again")
	equal(t, flowOf(t, e, "a1").Failures, 2, "failures after the second probe")
	probe = flowClaim(t, e, 10, flow)
	equal(t, len(probe), 1, "the next probe")
	noErr(t, e.Ack(ctxT(t), probe[0]), "the agent answers")
	f = flowOf(t, e, "a1")
	if f.Probing || f.Failures != 0 {
		t.Fatalf("after an answer: %+v, want no probing, no failures", f)
	}
	// The rest of the due fires: none left now (4 wait an hour), but a new
	// one goes out at full parallelism.
	arm(t, e, "a1", "new1", at)
	arm(t, e, "a1", "new2", at)
	equal(t, len(flowClaim(t, e, 10, flow)), 2, "leases after the agent answered")
}

func testFlowCancelOfHeldFire(t *testing.T, e relay.Engine) {
	at := now().Add(-time.Second)
	armN(t, e, "a1", 3, at)
	ls := flowClaim(t, e, 10, relay.Flow{Parallelism: 1})
	equal(t, len(ls), 1, "leases")
	ok, err := e.Cancel(ctxT(t), "a1", "j02")
	noErr(t, err, "cancel a held fire")
	equal(t, ok, true, "cancelled")
	equal(t, flowOf(t, e, "a1").Held, 1, "held after the cancel")
	// Re-arming a held fire elsewhere in time moves it out of the hold.
	arm(t, e, "a1", "j01", at.Add(time.Hour))
	equal(t, flowOf(t, e, "a1").Held, 0, "held after re-arming the held fire later")
	// Cancelling the leased one frees the agent's room.
	ok, err = e.Cancel(ctxT(t), "a1", ls[0].JobID)
	noErr(t, err, "cancel the leased fire")
	equal(t, ok, true, "cancelled")
	equal(t, flowOf(t, e, "a1").InFlight, 0, "in flight after cancelling the leased fire")
	arm(t, e, "a1", "j09", at)
	equal(t, len(flowClaim(t, e, 10, relay.Flow{Parallelism: 1})), 1, "leases after the cancel")
}

func testFlowReapReturnsRoom(t *testing.T, e relay.Engine) {
	// A lease that lapses (its process died) stops counting, and the reap
	// gives the agent's held fires their turn.
	at := now().Add(-time.Second)
	armN(t, e, "a1", 2, at)
	ls, err := e.Claim(ctxT(t), 10, 50*time.Millisecond, relay.Flow{Parallelism: 1})
	noErr(t, err, "claim")
	equal(t, len(ls), 1, "leases")
	equal(t, flowOf(t, e, "a1").Held, 1, "held")
	time.Sleep(120 * time.Millisecond) // the lease must lapse by the engine's clock
	_, err = e.Reap(ctxT(t))
	noErr(t, err, "reap")
	got := flowClaim(t, e, 10, relay.Flow{Parallelism: 1})
	equal(t, len(got), 1, "leases after the reap")
	equal(t, flowOf(t, e, "a1").Held, 1, "held after the reap (one in flight again)")
}

func testFlowFlexibleWindowPullsForward(t *testing.T, e relay.Engine) {
	// Two fires of one agent whose windows are open: the one spread to
	// later comes out in the same wake as the first; another agent's
	// spread fire does not.
	fireAt := now().Add(-time.Second)
	flex := 10 * time.Minute
	armFlex := func(agent, job string, due time.Time) {
		t.Helper()
		_, err := e.Arm(ctxT(t), relay.ArmRequest{AgentID: agent, InstanceID: "inst-" + agent, JobID: job,
			FireAt: fireAt, Flex: flex, DueAt: due, CallbackURL: "https://" + agent + ".example/cb", ScheduleID: newID()})
		noErr(t, err, "arm "+job)
	}
	armFlex("a1", "early", fireAt)
	armFlex("a1", "late", fireAt.Add(5*time.Minute))
	armFlex("a2", "other", fireAt.Add(5*time.Minute))
	got, err := e.Get(ctxT(t), "a1", "late")
	noErr(t, err, "get")
	equal(t, got.Flex, flex, "flex of the armed row")
	sameTime(t, got.DueAt, fireAt.Add(5*time.Minute), "due of the spread fire")
	sameTime(t, got.FireAt, fireAt, "fire_at of the spread fire (unchanged)")
	var jobs []string
	for range 3 {
		for _, l := range flowClaim(t, e, 10, relay.Flow{}) {
			jobs = append(jobs, l.JobID)
			sameTime(t, l.FireAt, fireAt, "fire_at of a lease")
		}
	}
	if len(jobs) != 2 || jobs[0] != "early" || jobs[1] != "late" {
		t.Fatalf("leased %v; want early, then late pulled into the same wake, and not a2's", jobs)
	}
	got, err = e.Get(ctxT(t), "a2", "other")
	noErr(t, err, "get")
	equal(t, got.State, relay.StateArmed, "a2's spread fire")
}

func testFlowFlexibleWindowChecked(t *testing.T, e relay.Engine) {
	fireAt := now().Add(time.Hour)
	for _, tc := range []struct {
		name string
		flex time.Duration
		due  time.Time
	}{
		{"due before fire_at", time.Minute, fireAt.Add(-time.Second)},
		{"due after the window", time.Minute, fireAt.Add(2 * time.Minute)},
		{"negative window", -time.Minute, time.Time{}},
		{"window over a day", relay.MaxFlex + time.Second, time.Time{}},
	} {
		_, err := e.Arm(ctxT(t), relay.ArmRequest{AgentID: "a1", InstanceID: "i", JobID: "j",
			FireAt: fireAt, Flex: tc.flex, DueAt: tc.due, CallbackURL: "https://a1.example/cb", ScheduleID: newID()})
		if err == nil {
			t.Fatalf("%s: arm accepted", tc.name)
		}
	}
	equal(t, stats(t, e).Armed, int64(0), "armed after refused arms")
	// The same instant with another window re-arms; the same window again
	// changes nothing.
	res1, err := e.Arm(ctxT(t), relay.ArmRequest{AgentID: "a1", InstanceID: "i", JobID: "j", FireAt: fireAt, CallbackURL: "https://a1.example/cb", ScheduleID: newID()})
	noErr(t, err, "arm")
	res2, err := e.Arm(ctxT(t), relay.ArmRequest{AgentID: "a1", InstanceID: "i", JobID: "j", FireAt: fireAt, Flex: time.Minute, CallbackURL: "https://a1.example/cb", ScheduleID: newID()})
	noErr(t, err, "arm with a window")
	equal(t, res2.Changed, true, "a new window changes the fire")
	equal(t, res2.Replaced, res1.OneShot.ScheduleID, "replaced")
	res3, err := e.Arm(ctxT(t), relay.ArmRequest{AgentID: "a1", InstanceID: "i", JobID: "j", FireAt: fireAt, Flex: time.Minute, CallbackURL: "https://a1.example/cb", ScheduleID: newID()})
	noErr(t, err, "arm the same again")
	equal(t, res3.Changed, false, "the same window again")
}

func testFlowAgentPhaseStable(t *testing.T, e relay.Engine) {
	seen := map[float64]string{}
	for i := range 16 {
		agent := fmt.Sprintf("agent-%d", i)
		p, err := e.AgentPhase(ctxT(t), agent)
		noErr(t, err, "phase")
		if p <= 0 || p >= 1 {
			t.Fatalf("phase of %s = %v, want in (0, 1)", agent, p)
		}
		if other, dup := seen[p]; dup {
			t.Fatalf("%s and %s share phase %v", agent, other, p)
		}
		seen[p] = agent
		again, err := e.AgentPhase(ctxT(t), agent)
		noErr(t, err, "phase again")
		equal(t, again, p, "phase of "+agent+" asked again")
	}
	// 16 agents of the sequence fill each sixteenth of [0, 1) once.
	var bins [16]int
	for p := range seen {
		bins[int(p*16)]++
	}
	for i, n := range bins {
		if n != 1 {
			t.Fatalf("phases per sixteenth %v: bin %d has %d, want one each", bins, i, n)
		}
	}
}

func testFlowDownHoldsTheAgent(t *testing.T, e relay.Engine, c *Clock) {
	at := c.Now().Add(-time.Second)
	armN(t, e, "a1", 3, at)
	flow := relay.Flow{Parallelism: 4}
	ls := flowClaim(t, e, 1, flow)
	equal(t, len(ls), 1, "first lease")
	noErr(t, e.Down(ctxT(t), ls[0], 10*time.Second, 5*time.Second, "503 Retry-After: 5"), "down")
	// Another agent's fire, due with a1's, goes out; a1's are held.
	armN(t, e, "a2", 1, at)
	got := perAgent(flowClaim(t, e, 10, flow))
	equal(t, got[ls[0].AgentID], 0, "leases of the held agent")
	equal(t, got["a2"], 1, "leases of another agent")
	wait, ok, err := e.NextDue(ctxT(t))
	noErr(t, err, "next due")
	if !ok || wait > 5*time.Second || wait < 4*time.Second {
		t.Fatalf("next due in %s (%v); want the agent's hold, 5s", wait, ok)
	}
	gate := flowOf(t, e, ls[0].AgentID).GateUntil
	sameTime(t, gate, c.Now().Add(5*time.Second), "gate")
	c.Advance(5 * time.Second)
	probe := flowClaim(t, e, 10, flow)
	equal(t, len(probe), 1, "leases after the hold (one probe)")
	equal(t, probe[0].AgentID, ls[0].AgentID, "the probe's agent")
	if probe[0].JobID == ls[0].JobID {
		t.Fatalf("probe is the failed fire %s, due only after its own delay", probe[0].JobID)
	}
}

func testFlowRateSpacesFires(t *testing.T, e relay.Engine, c *Clock) {
	at := c.Now().Add(-time.Second)
	armN(t, e, "a1", 3, at)
	flow := relay.Flow{Rate: 4} // one per 250ms
	equal(t, len(flowClaim(t, e, 10, flow)), 1, "leases at once")
	equal(t, len(flowClaim(t, e, 10, flow)), 0, "leases before the next slot")
	wait, ok, err := e.NextDue(ctxT(t))
	noErr(t, err, "next due")
	if !ok || wait > 250*time.Millisecond {
		t.Fatalf("next due in %s (%v); want the next rate slot, within 250ms", wait, ok)
	}
	c.Advance(250 * time.Millisecond)
	equal(t, len(flowClaim(t, e, 10, flow)), 1, "leases at the next slot")
	c.Advance(250 * time.Millisecond)
	equal(t, len(flowClaim(t, e, 10, flow)), 1, "leases at the slot after")
}

// flowDispatcherTests check flow control through dispatchers.
var flowDispatcherTests = []engineTest{
	{"FlowSlowNeighbourDoesNotDelay", testFlowSlowNeighbourDoesNotDelay},
	{"FlowWakingAgentIsProbed", testFlowWakingAgentIsProbed},
	{"FlowMisfireGraceDeadLetters", testFlowMisfireGraceDeadLetters},
	{"FlowDisabledAgentIsNotCalled", testFlowDisabledAgentIsNotCalled},
}

// agentDown is NAS's answer for an agent that is not answering.
var agentDown = Reply{Status: 503, Body: `{"error":"agent_unavailable","error_description":"agent answered 503"}`}

func testFlowSlowNeighbourDoesNotDelay(t *testing.T, e relay.Engine) {
	// A slow agent with a backlog due at the same instant as a prompt
	// agent's few fires: the prompt agent's fires go out at once, on the
	// dispatcher's defaults.
	slow := Delivered
	slow.Hold = 300 * time.Millisecond
	b := startDispatch(t, e, func(req contract.RelayRequest, _ int) Reply {
		if req.AgentID == "a-slow" {
			return slow
		}
		return Delivered
	}, relay.DispatcherConfig{}, 1)
	at := time.Now().Add(100 * time.Millisecond)
	armN(t, e, "a-slow", 60, at)
	armN(t, e, "z-prompt", 4, at)
	var prompt []Call
	skipped := 0
	deadline := time.After(20 * time.Second)
	for len(prompt) < 4 {
		select {
		case c := <-b.route.arrived:
			if c.Req.AgentID == "z-prompt" {
				prompt = append(prompt, c)
			} else {
				skipped++
			}
		case <-deadline:
			t.Fatalf("%d of the prompt agent's fires delivered", len(prompt))
		}
	}
	for _, c := range prompt {
		if lag := c.At.Sub(at); lag > time.Second {
			t.Fatalf("prompt agent's fire %s arrived %s after fire_at, behind its slow neighbour", c.Req.JobID, lag)
		}
	}
	if most, _ := b.route.MaxActive("a-slow"); most > 4 {
		t.Fatalf("slow agent had %d deliveries at once, over its parallelism 4", most)
	}
	b.route.Wait(t, 64-len(prompt)-skipped, 20*time.Second)
	drained(t, e)
	b.stop()
}

func testFlowWakingAgentIsProbed(t *testing.T, e relay.Engine) {
	// An agent that answers 503 for a while gets one probe at a time, not
	// every due fire per retry; once it answers, the rest go out, each
	// once.
	const fires = 40
	var mu sync.Mutex
	awake := false
	downCalls := 0
	b := startDispatch(t, e, func(req contract.RelayRequest, _ int) Reply {
		mu.Lock()
		defer mu.Unlock()
		if !awake {
			downCalls++
			return agentDown
		}
		return Delivered
	}, relay.DispatcherConfig{Retry: relay.RetryPolicy{Base: 100 * time.Millisecond, MaxDelay: 200 * time.Millisecond,
		ColdStart: []time.Duration{50 * time.Millisecond}, MaxAttempts: 100}}, 1)
	armN(t, e, "waking", fires, time.Now())
	eventually(t, 10*time.Second, "the agent probed", func() bool {
		f, err := e.AgentFlow(ctxT(t), "waking")
		return err == nil && f.Probing && f.Failures >= 4
	})
	mu.Lock()
	calls := downCalls
	awake = true
	mu.Unlock()
	if calls > 4+8 {
		t.Fatalf("%d calls to a waking agent with %d due fires over 4 probes; want its parallelism plus one per probe", calls, fires)
	}
	delivered := map[string]int{}
	eventually(t, 20*time.Second, "every fire delivered once the agent answers", func() bool {
		delivered = map[string]int{}
		for _, c := range b.route.Calls() {
			if c.CtxErr == nil {
				mu.Lock()
				delivered[c.Req.JobID]++
				mu.Unlock()
			}
		}
		s, err := e.Stats(ctxT(t))
		return err == nil && s.Armed == 0
	})
	b.stop()
	equal(t, len(delivered), fires, "fires called")
	f := flowOf(t, e, "waking")
	if f.Probing || f.Failures != 0 {
		t.Fatalf("after the agent answered: %+v, want no probing", f)
	}
}

func testFlowMisfireGraceDeadLetters(t *testing.T, e relay.Engine) {
	b := startDispatch(t, e, always(Delivered), relay.DispatcherConfig{MisfireGrace: time.Second}, 1)
	armAt(t, e, "a1", "stale", time.Now().Add(-3*time.Second))
	armAt(t, e, "a1", "fresh", time.Now())
	b.route.Wait(t, 1, 5*time.Second)
	drained(t, e)
	b.stop()
	calls := b.route.Calls()
	if len(calls) != 1 || calls[0].Req.JobID != "fresh" {
		t.Fatalf("calls %v: want only the fresh fire", calls)
	}
	failed, err := e.ListFailed(ctxT(t), "a1", 0, 0)
	noErr(t, err, "list failed")
	if len(failed) != 1 || failed[0].JobID != "stale" || !strings.Contains(failed[0].Reason, "misfire grace") {
		t.Fatalf("failed fires %+v: want the stale one, past its misfire grace", failed)
	}
}

func testFlowDisabledAgentIsNotCalled(t *testing.T, e relay.Engine) {
	b := startDispatch(t, e, always(Delivered), relay.DispatcherConfig{}, 1)
	noErr(t, e.SetAgentPolicy(ctxT(t), "off", relay.AgentPolicy{Disabled: true}), "disable")
	at := time.Now()
	armN(t, e, "off", 3, at)
	// Due after the disabled agent's fires: once it is delivered, a claim
	// has passed over them.
	armAt(t, e, "on", "later", at.Add(50*time.Millisecond))
	b.route.Wait(t, 1, 5*time.Second)
	for _, c := range b.route.Calls() {
		if c.Req.AgentID == "off" {
			t.Fatalf("disabled agent called for %s", c.Req.JobID)
		}
	}
	eventually(t, 5*time.Second, "the disabled agent's fires held", func() bool {
		f, err := e.AgentFlow(ctxT(t), "off")
		return err == nil && f.Held == 3
	})
	noErr(t, e.SetAgentPolicy(ctxT(t), "off", relay.AgentPolicy{}), "enable")
	b.route.Wait(t, 3, 5*time.Second)
	drained(t, e)
	b.stop()
	equal(t, len(b.route.PerID()), 4, "fires delivered once each")
}

// testPeerParallelismAcrossProcesses: two dispatchers in two processes
// together keep an agent's parallelism.
func testPeerParallelismAcrossProcesses(t *testing.T, e, peer relay.Engine) {
	slow := Delivered
	slow.Hold = 40 * time.Millisecond
	cfg := relay.DispatcherConfig{PerAgent: 2}
	one := startDispatch(t, e, always(slow), cfg, 1)
	two := startDispatchers(t, peer, dispatchOptions{answer: always(slow), cfg: cfg})
	at := time.Now().Add(50 * time.Millisecond)
	armN(t, e, "a1", 16, at)
	eventually(t, 20*time.Second, "every fire delivered", func() bool {
		return len(one.route.Calls())+len(two.route.Calls()) == 16
	})
	drained(t, e)
	one.stop()
	two.stop()
	// Each route sees only its own process's calls: their overlap is
	// measured from the calls' times.
	calls := append(one.route.Calls(), two.route.Calls()...)
	for _, c := range calls {
		overlapping := 0
		for _, d := range calls {
			if d.At.Before(c.Finished) && c.At.Before(d.Finished) {
				overlapping++
			}
		}
		if overlapping > 2+1 { // a call ends just before its lease's ack frees the slot
			t.Fatalf("%d calls overlapped %s; want at most the agent's parallelism, 2", overlapping, c.Req.JobID)
		}
	}
}
