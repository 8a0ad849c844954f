package nashttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
)

// withAgents replaces the test agents with entries (token hashes made from
// their tokens by the caller).
func withAgents(t *testing.T, entries ...nas.AgentEntry) setupOpt {
	return func(_ *nas.Config, o *nas.Options) {
		agents, err := nas.NewStaticAgents(entries)
		if err != nil {
			t.Fatal(err)
		}
		o.Verifier = agents
	}
}

// withBDisabledByFile lists agent B with disabled: true.
func withBDisabledByFile(t *testing.T) setupOpt {
	return withAgents(t,
		nas.AgentEntry{AgentID: agentA, InstanceID: instanceA, TokenSHA256: nas.TokenSHA256(tokenA)},
		nas.AgentEntry{AgentID: agentB, InstanceID: instanceB, TokenSHA256: nas.TokenSHA256(tokenB), Disabled: true})
}

// agentState posts the operator's disable or enable of agent.
func (b *bundle) agentState(verb, agent string) *httptest.ResponseRecorder {
	b.t.Helper()
	return b.do(b.internal, request{method: "POST", path: "/api/operator/agents/" + agent + "/" + verb, token: opToken})
}

// agentCalls are the calls of the agent API, each with a valid body.
func agentCalls(b *bundle) map[string]request {
	fireAt := time.Now().Add(time.Hour)
	p := b.provisionBody("job-k", fireAt)
	return map[string]request{
		"provision": {method: "POST", path: contract.PathProvision, body: p},
		"list":      {method: "GET", path: contract.PathList},
		"cancel":    {method: "POST", path: contract.PathCancel, body: contract.CancelRequest{JobID: "job-k"}},
		"put armed": {method: "PUT", path: contract.PathArmed, body: contract.PutArmedRequest{Armed: []contract.DesiredArm{{
			JobID: p.JobID, FireAt: p.FireAt, AgentCallbackURL: p.AgentCallbackURL, DedupKey: p.DedupKey}}}},
		"failed-fires ack": {method: "POST", path: contract.PathFailedFiresAck, body: contract.FailedFiresAckRequest{ScheduleIDs: []string{"sch-x"}}},
	}
}

// TestAgentKillSwitch: the operator's disable holds an agent's fires and
// refuses each of its calls with 403 invalid_client (another agent is
// served); enable serves it again; the answers, the refusals and the store
// follow the documented routes.
func TestAgentKillSwitch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.provision(tokenA, "held", time.Now().Add(time.Hour))

	rec := b.agentState("disable", agentA)
	if rec.Code != 200 || decodeBody[contract.AgentStateResponse](t, rec) != (contract.AgentStateResponse{AgentID: agentA, Disabled: true}) {
		t.Fatalf("disable: %d %s", rec.Code, rec.Body)
	}
	if fl, err := b.engine.AgentFlow(ctx, agentA); err != nil || !fl.Policy.Disabled {
		t.Fatalf("the store's policy %+v %v, want disabled", fl.Policy, err)
	}
	if rec := b.agentState("disable", agentA); rec.Code != 200 {
		t.Fatalf("disable again: %d %s", rec.Code, rec.Body)
	}
	for name, r := range agentCalls(b) {
		r.token = tokenA
		rec := b.do(b.public, r)
		if rec.Code != http.StatusForbidden || errCode(t, rec) != contract.CodeInvalidClient {
			t.Errorf("%s while disabled: %d %s, want 403 invalid_client", name, rec.Code, rec.Body)
		}
		r.token = tokenB
		if rec := b.do(b.public, r); rec.Code != 200 {
			t.Errorf("%s of another agent: %d %s", name, rec.Code, rec.Body)
		}
	}
	// Nothing of the disabled agent was lost, and nothing of it goes out.
	if _, err := b.engine.Get(ctx, agentA, "held"); err != nil {
		t.Fatalf("the disabled agent's fire: %v", err)
	}
	if _, err := b.engine.Arm(ctx, armRequest(b, "due", time.Now().Add(-time.Second))); err != nil {
		t.Fatal(err)
	}
	if leases, err := b.engine.Claim(ctx, 10, time.Minute, relay.Flow{}); err != nil || len(leases) != 0 {
		t.Fatalf("a disabled agent's due fire was claimed: %+v %v", leases, err)
	}

	rec = b.agentState("enable", agentA)
	if rec.Code != 200 || decodeBody[contract.AgentStateResponse](t, rec) != (contract.AgentStateResponse{AgentID: agentA}) {
		t.Fatalf("enable: %d %s", rec.Code, rec.Body)
	}
	if fl, err := b.engine.AgentFlow(ctx, agentA); err != nil || fl.Policy.Disabled {
		t.Fatalf("the store's policy %+v %v after enable", fl.Policy, err)
	}
	if leases, err := b.engine.Claim(ctx, 10, time.Minute, relay.Flow{}); err != nil || len(leases) != 1 || leases[0].JobID != "due" {
		t.Fatalf("the enabled agent's held fire: %+v %v, want it claimed", leases, err)
	}
	for name, r := range agentCalls(b) {
		r.token = tokenA
		if rec := b.do(b.public, r); rec.Code != 200 {
			t.Errorf("%s after enable: %d %s", name, rec.Code, rec.Body)
		}
	}
}

// TestAgentKillSwitchRefusals: the routes' refusals, each changing nothing.
func TestAgentKillSwitchRefusals(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 257)
	tests := []struct {
		name   string
		opts   func(t *testing.T) []setupOpt
		prep   func(t *testing.T, b *bundle)
		req    request
		status int
		code   string
		agent  string // whose policy must stay as it was (zero, or disabled for B by file)
	}{
		{name: "unknown agent disable", req: request{method: "POST", path: "/api/operator/agents/ghost/disable", token: opToken},
			status: 404, code: contract.CodeNotFound, agent: "ghost"},
		{name: "unknown agent enable", req: request{method: "POST", path: "/api/operator/agents/ghost/enable", token: opToken},
			status: 404, code: contract.CodeNotFound, agent: "ghost"},
		{name: "id too long", req: request{method: "POST", path: "/api/operator/agents/" + long + "/disable", token: opToken, invalid: true},
			status: 400, code: contract.CodeInvalidRequest, agent: long},
		{name: "without a token", req: request{method: "POST", path: "/api/operator/agents/" + agentA + "/disable"},
			status: 401, code: contract.CodeUnauthenticated, agent: agentA},
		{name: "with an agent's token", req: request{method: "POST", path: "/api/operator/agents/" + agentA + "/disable", token: tokenA},
			status: 403, code: contract.CodeForbidden, agent: agentA},
		{name: "enable an agent the file disables", opts: func(t *testing.T) []setupOpt { return []setupOpt{withBDisabledByFile(t)} },
			req:    request{method: "POST", path: "/api/operator/agents/" + agentB + "/enable", token: opToken},
			status: 409, code: contract.CodeConflict, agent: agentB},
		{name: "store down", opts: func(*testing.T) []setupOpt { return []setupOpt{withBrokenEngine} },
			req:    request{method: "POST", path: "/api/operator/agents/ghost/disable", token: opToken},
			status: 500, code: contract.CodeServerError, agent: "ghost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opts []setupOpt
			if tt.opts != nil {
				opts = tt.opts(t)
			}
			b := setup(t, opts...)
			ctx := context.Background()
			before, err := b.engine.AgentFlow(ctx, tt.agent)
			if err != nil {
				t.Fatal(err)
			}
			rec := b.do(b.internal, tt.req)
			if rec.Code != tt.status || errCode(t, rec) != tt.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tt.status, tt.code)
			}
			if after, err := b.engine.AgentFlow(ctx, tt.agent); err != nil || after.Policy != before.Policy {
				t.Fatalf("the policy changed: %+v → %+v (%v)", before.Policy, after.Policy, err)
			}
		})
	}
}

// TestAgentKillSwitchKnownAgents: an agent not in the agents file is known
// by what the store holds of it (here an armed fire), and an agent the file
// disables is refused and stays disabled whatever the operator does.
func TestAgentKillSwitchKnownAgents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, withBDisabledByFile(t))
	if _, err := b.engine.Arm(ctx, relay.ArmRequest{AgentID: "jwt-agent", InstanceID: "i-jwt", JobID: "j", FireAt: time.Now().Add(time.Hour),
		CallbackURL: b.agent.URL(), ScheduleID: "sch-jwt"}); err != nil {
		t.Fatal(err)
	}
	if rec := b.agentState("disable", "jwt-agent"); rec.Code != 200 {
		t.Fatalf("disable an agent with an armed fire: %d %s", rec.Code, rec.Body)
	}
	if rec := b.agentState("enable", "jwt-agent"); rec.Code != 200 {
		t.Fatalf("enable it: %d %s", rec.Code, rec.Body)
	}
	// B: written disabled to the store at start, its calls refused.
	if fl, err := b.engine.AgentFlow(ctx, agentB); err != nil || !fl.Policy.Disabled {
		t.Fatalf("B's policy %+v %v, want disabled from the agents file", fl.Policy, err)
	}
	r := agentCalls(b)["provision"]
	r.token = tokenB
	if rec := b.do(b.public, r); rec.Code != 403 || errCode(t, rec) != contract.CodeInvalidClient {
		t.Fatalf("a file-disabled agent's provision: %d %s", rec.Code, rec.Body)
	}
	rec := b.agentState("enable", agentB)
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), "agents file") {
		t.Fatalf("enable B: %d %s, want 409 naming the agents file", rec.Code, rec.Body)
	}
	if rec := b.agentState("disable", agentB); rec.Code != 200 {
		t.Fatalf("disable B (already): %d %s", rec.Code, rec.Body)
	}
}

// TestOverviewAgentFlows: the overview lists each agent's flow control with
// the defaults filled in, disabled agents and why.
func TestOverviewAgentFlows(t *testing.T) {
	t.Parallel()
	b := setup(t, withBDisabledByFile(t), func(c *nas.Config, _ *nas.Options) {
		n, r := 3, 1.5
		c.Relay.PerAgent = nas.PerAgentConfig{Parallelism: &n, Rate: &r}
	})
	if rec := b.agentState("disable", agentA); rec.Code != 200 {
		t.Fatalf("disable: %d %s", rec.Code, rec.Body)
	}
	rec := b.do(b.internal, request{method: "GET", path: contract.PathOperatorOverview, token: opToken})
	if rec.Code != 200 {
		t.Fatalf("overview: %d %s", rec.Code, rec.Body)
	}
	ov := decodeBody[contract.OperatorOverview](t, rec)
	want := []contract.AgentFlowState{
		{AgentID: agentA, Parallelism: 3, Rate: 1.5, Disabled: true},
		{AgentID: agentB, Parallelism: 3, Rate: 1.5, Disabled: true, DisabledByFile: true},
	}
	if len(ov.AgentFlows) != len(want) || ov.AgentFlowsTruncated {
		t.Fatalf("agent_flows %+v, want %+v", ov.AgentFlows, want)
	}
	for i, w := range want {
		if g := ov.AgentFlows[i]; g != w {
			t.Errorf("agent_flows[%d] = %+v, want %+v", i, g, w)
		}
	}
	if ov.Store.Held != 0 || ov.Store.Probing != 0 {
		t.Errorf("store %+v", ov.Store)
	}
	// Enabled again, with no policy of its own left, A is no longer listed.
	if rec := b.agentState("enable", agentA); rec.Code != 200 {
		t.Fatalf("enable: %d %s", rec.Code, rec.Body)
	}
	ov = decodeBody[contract.OperatorOverview](t, b.do(b.internal, request{method: "GET", path: contract.PathOperatorOverview, token: opToken}))
	if len(ov.AgentFlows) != 1 || ov.AgentFlows[0].AgentID != agentB {
		t.Fatalf("agent_flows after enable: %+v", ov.AgentFlows)
	}
}

// TestFlexSecondsRefused: a flex_seconds out of range, a string or a
// fraction is a 400 invalid_request on provision and on the bulk update,
// and nothing is armed.
func TestFlexSecondsRefused(t *testing.T) {
	t.Parallel()
	for _, flex := range []string{`-1`, `86401`, `"5"`, `1.5`, `1e3`, `null`, `true`} {
		for _, route := range []string{"provision", "put armed"} {
			t.Run(route+" "+flex, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				fireAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
				entry := `{"job_id":"flex","fire_at":"` + fireAt + `","agent_callback_url":"` + b.agent.URL() +
					`","dedup_key":"flex:` + fireAt + `","flex_seconds":` + flex + `}`
				r := request{method: "POST", path: contract.PathProvision, token: tokenA, body: entry, invalid: true}
				if route == "put armed" {
					r = request{method: "PUT", path: contract.PathArmed, token: tokenA, body: `{"armed":[` + entry + `]}`, invalid: true}
				}
				rec := b.do(b.public, r)
				if rec.Code != http.StatusBadRequest || errCode(t, rec) != contract.CodeInvalidRequest || !strings.Contains(rec.Body.String(), "flex_seconds") {
					t.Fatalf("%d %s, want 400 invalid_request naming flex_seconds", rec.Code, rec.Body)
				}
				if items, _, err := b.engine.List(context.Background(), agentA, "", 10); err != nil || len(items) != 0 {
					t.Fatalf("armed %+v %v after a refused call", items, err)
				}
			})
		}
	}
}

// TestFlexSecondsArms: a fire with a flexible window is due at the agent's
// phase inside it, the same offset for the job's next slot and for the
// agent's other jobs; list and the bulk answer report the window; a fire
// without one is due at fire_at.
func TestFlexSecondsArms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const flex = 600
	slot := time.Now().Add(time.Hour).Truncate(time.Second)
	offset := func(job string, fireAt time.Time) time.Duration {
		t.Helper()
		row, err := b.engine.Get(ctx, agentA, job)
		if err != nil {
			t.Fatal(err)
		}
		if !row.FireAt.Equal(fireAt) || row.Flex != flex*time.Second {
			t.Fatalf("%s armed at %v flex %v, want %v flex %ds", job, row.FireAt, row.Flex, fireAt, flex)
		}
		off := row.DueAt.Sub(fireAt)
		if off < 0 || off > flex*time.Second {
			t.Fatalf("%s due %v after fire_at, outside its window of %ds", job, off, flex)
		}
		return off
	}
	provision := func(job string, at time.Time, flexSeconds int64) {
		t.Helper()
		p := b.provisionBody(job, at)
		p.FlexSeconds = flexSeconds
		if rec := b.do(b.public, request{method: "POST", path: contract.PathProvision, token: tokenA, body: p}); rec.Code != 200 {
			t.Fatalf("provision %s: %d %s", job, rec.Code, rec.Body)
		}
	}
	provision("flex", slot, flex)
	first := offset("flex", slot)
	provision("flex", slot.Add(time.Hour), flex)
	if next := offset("flex", slot.Add(time.Hour)); next != first {
		t.Fatalf("the next slot is %v into its window, the first %v", next, first)
	}
	provision("other", slot, flex)
	if other := offset("other", slot); other != first {
		t.Fatalf("another job of the agent is %v into its window, the first %v", other, first)
	}
	provision("plain", slot, 0)
	if row, err := b.engine.Get(ctx, agentA, "plain"); err != nil || !row.DueAt.Equal(slot) || row.Flex != 0 {
		t.Fatalf("a fire without a window: %+v %v", row, err)
	}

	list := decodeBody[contract.ListResponse](t, b.do(b.public, request{method: "GET", path: contract.PathList, token: tokenA}))
	got := map[string]int64{}
	for _, a := range list.Armed {
		got[a.JobID] = a.FlexSeconds
	}
	if got["flex"] != flex || got["other"] != flex || got["plain"] != 0 || len(got) != 3 {
		t.Fatalf("list flex_seconds %v", got)
	}

	// The bulk update arms the same way, and reports the windows.
	p := b.provisionBody("bulk", slot)
	p.FlexSeconds = flex
	rec := b.do(b.public, request{method: "PUT", path: contract.PathArmed, token: tokenA, body: contract.PutArmedRequest{Armed: []contract.DesiredArm{{
		JobID: p.JobID, FireAt: p.FireAt, AgentCallbackURL: p.AgentCallbackURL, DedupKey: p.DedupKey, FlexSeconds: p.FlexSeconds}}}})
	if rec.Code != 200 {
		t.Fatalf("put armed: %d %s", rec.Code, rec.Body)
	}
	if resp := decodeBody[contract.PutArmedResponse](t, rec); len(resp.Armed) != 1 || resp.Armed[0].FlexSeconds != flex {
		t.Fatalf("put armed answered %+v", resp.Armed)
	}
	if off := offset("bulk", slot); off != first {
		t.Fatalf("the bulk update armed %v into the window, provision %v", off, first)
	}
	// Another agent has a phase of its own.
	p = b.provisionBody("flex", slot)
	p.FlexSeconds = flex
	if rec := b.do(b.public, request{method: "POST", path: contract.PathProvision, token: tokenB, body: p}); rec.Code != 200 {
		t.Fatalf("provision of B: %d %s", rec.Code, rec.Body)
	}
	rowB, err := b.engine.Get(ctx, agentB, "flex")
	if err != nil {
		t.Fatal(err)
	}
	if rowB.DueAt.Sub(slot) == first {
		t.Errorf("agents A and B share the offset %v", first)
	}
}
