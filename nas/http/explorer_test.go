package nashttp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// seedHistory adds a minute of deliveries of agent A to the store, a
// recent delivery, a dead letter and armed fires job-0 … job-(n-1) an
// hour apart from now on.
func seedHistory(t *testing.T, b *bundle, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	lag := make([]int64, len(relay.HistoryLagBounds)+1)
	lag[1] = 4
	err := b.engine.AddHistory(ctx, []relay.HistoryMinute{{Minute: now.Truncate(time.Minute),
		Outcomes: map[string]int64{relay.HistoryDelivered: 4, relay.HistoryRetry: 2}, Retries: 1, Lag: lag}},
		[]relay.DeliveryRecord{{AgentID: agentA, JobID: "job-0", ScheduleID: "sch-x", FireAt: now.Add(-time.Second), Attempt: 1,
			Outcome: relay.HistoryDelivered, Lag: 20 * time.Millisecond, At: now}})
	if err != nil {
		t.Fatal(err)
	}
	b.deadLetter(t, "dead")
	for i := range n {
		if _, err := b.engine.Arm(ctx, armRequest(b, fmt.Sprintf("job-%d", i), now.Add(time.Duration(n-i)*time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNASOperatorExplorer(t *testing.T) {
	t.Parallel()
	agentPath := "/api/operator/agents/" + agentA
	tests := []struct {
		name   string
		opts   []setupOpt
		req    request
		status int
		code   string
		check  func(t *testing.T, body string)
	}{
		{name: "history of the hour", req: request{method: "GET", path: contract.PathOperatorHistory, token: opToken}, status: 200},
		{name: "history of the day", req: request{method: "GET", path: contract.PathOperatorHistory + "?window=day", token: opToken}, status: 200},
		{name: "history with a bad window", req: request{method: "GET", path: contract.PathOperatorHistory + "?window=week", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "history with an unknown parameter", req: request{method: "GET", path: contract.PathOperatorHistory + "?from=1", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "history with the window twice", req: request{method: "GET", path: contract.PathOperatorHistory + "?window=hour&window=day", token: opToken}, status: 400, code: contract.CodeInvalidRequest},
		{name: "history without token", req: request{method: "GET", path: contract.PathOperatorHistory}, status: 401, code: contract.CodeUnauthenticated},
		{name: "history with an agent token", req: request{method: "GET", path: contract.PathOperatorHistory, token: tokenA}, status: 403, code: contract.CodeForbidden},
		{name: "history with the store down", opts: []setupOpt{withBrokenEngine}, req: request{method: "GET", path: contract.PathOperatorHistory, token: opToken}, status: 500, code: contract.CodeServerError},
		{name: "agents", req: request{method: "GET", path: contract.PathOperatorAgents, token: opToken}, status: 200},
		{name: "agents filtered", req: request{method: "GET", path: contract.PathOperatorAgents + "?q=" + strings.ToUpper(agentB) + "&limit=1", token: opToken}, status: 200},
		{name: "agents with limit 0", req: request{method: "GET", path: contract.PathOperatorAgents + "?limit=0", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "agents with limit x", req: request{method: "GET", path: contract.PathOperatorAgents + "?limit=x", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "agents with a bad cursor", req: request{method: "GET", path: contract.PathOperatorAgents + "?cursor=-3", token: opToken}, status: 400, code: contract.CodeInvalidCursor},
		{name: "agents with an empty cursor", req: request{method: "GET", path: contract.PathOperatorAgents + "?cursor=", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidCursor},
		{name: "agents with an overlong query", req: request{method: "GET", path: contract.PathOperatorAgents + "?q=" + strings.Repeat("a", 300), token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "agents without token", req: request{method: "GET", path: contract.PathOperatorAgents}, status: 401, code: contract.CodeUnauthenticated},
		{name: "agents with the store down", opts: []setupOpt{withBrokenEngine}, req: request{method: "GET", path: contract.PathOperatorAgents, token: opToken}, status: 500, code: contract.CodeServerError},
		{name: "agent", req: request{method: "GET", path: agentPath, token: opToken}, status: 200},
		{name: "agent with a parameter", req: request{method: "GET", path: agentPath + "?x=1", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "unknown agent", req: request{method: "GET", path: "/api/operator/agents/nobody", token: opToken}, status: 404, code: contract.CodeNotFound},
		{name: "agent with an overlong id", req: request{method: "GET", path: "/api/operator/agents/" + strings.Repeat("a", 300), token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "agent without token", req: request{method: "GET", path: agentPath}, status: 401, code: contract.CodeUnauthenticated},
		{name: "armed", req: request{method: "GET", path: agentPath + "/armed?job=JOB-1&limit=2", token: opToken}, status: 200},
		{name: "armed with a bad limit", req: request{method: "GET", path: agentPath + "/armed?limit=-1", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "armed with a bad cursor", req: request{method: "GET", path: agentPath + "/armed?cursor=abc", token: opToken}, status: 400, code: contract.CodeInvalidCursor},
		{name: "armed with an unknown parameter", req: request{method: "GET", path: agentPath + "/armed?q=x", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "armed of an unknown agent", req: request{method: "GET", path: "/api/operator/agents/nobody/armed", token: opToken}, status: 404, code: contract.CodeNotFound},
		{name: "armed without token", req: request{method: "GET", path: agentPath + "/armed"}, status: 401, code: contract.CodeUnauthenticated},
		{name: "processes", req: request{method: "GET", path: contract.PathOperatorProcesses, token: opToken}, status: 200},
		{name: "processes with a parameter", req: request{method: "GET", path: contract.PathOperatorProcesses + "?all=1", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "processes without token", req: request{method: "GET", path: contract.PathOperatorProcesses}, status: 401, code: contract.CodeUnauthenticated},
		{name: "processes with the store down", opts: []setupOpt{withBrokenEngine}, req: request{method: "GET", path: contract.PathOperatorProcesses, token: opToken}, status: 500, code: contract.CodeServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.opts...)
			if len(tt.opts) == 0 {
				seedHistory(t, b, 3)
			}
			rec := b.do(b.internal, tt.req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.code != "" && errCode(t, rec) != tt.code {
				t.Fatalf("%s, want %s", rec.Body, tt.code)
			}
		})
	}
}

// TestNASOperatorExplorerAnswers checks what the explorer's routes say of
// a store with history: the points, the agents (B, which holds nothing,
// listed too), the armed fires next first, paged and searched.
func TestNASOperatorExplorerAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seedHistory(t, b, 5)
	h := decodeBody[contract.OperatorHistory](t, b.do(b.internal, request{method: "GET", path: contract.PathOperatorHistory, token: opToken}))
	last := h.Points[len(h.Points)-1]
	if len(h.Points) != 60 || h.StepSeconds != 60 || last.Outcomes[relay.HistoryDelivered] != 4 || last.Retries != 1 ||
		last.LagP50Seconds == nil || *last.LagP50Seconds <= 0.01 || *last.LagP50Seconds > 0.025 || last.DeadLettered != 1 ||
		h.Totals[relay.HistoryRetry] != 2 || len(h.Due) != 24 {
		t.Fatalf("history: %+v (last point %+v)", h, last)
	}
	var due int64
	for _, n := range h.Due {
		due += n
	}
	if due != 5 {
		t.Fatalf("due in the next 24 hours: %v, want 5 in all", h.Due)
	}
	day := decodeBody[contract.OperatorHistory](t, b.do(b.internal, request{method: "GET", path: contract.PathOperatorHistory + "?window=day", token: opToken}))
	if len(day.Points) != 144 || day.StepSeconds != 600 || day.Totals[relay.HistoryDelivered] != 4 {
		t.Fatalf("day: %d points, step %d, totals %v", len(day.Points), day.StepSeconds, day.Totals)
	}
	agents := decodeBody[contract.OperatorAgents](t, b.do(b.internal, request{method: "GET", path: contract.PathOperatorAgents, token: opToken}))
	if agents.Total != 2 || agents.Agents[0].AgentID != agentA || agents.Agents[0].Armed != 5 || agents.Agents[0].LastDelivery == nil ||
		agents.Agents[0].State != "delivering" || agents.Agents[1].AgentID != agentB || agents.Agents[1].Armed != 0 {
		t.Fatalf("agents: %+v", agents)
	}
	page := decodeBody[contract.OperatorAgents](t, b.do(b.internal, request{method: "GET", path: contract.PathOperatorAgents + "?limit=1", token: opToken}))
	if len(page.Agents) != 1 || page.NextCursor == nil {
		t.Fatalf("first page of agents: %+v", page)
	}
	page = decodeBody[contract.OperatorAgents](t, b.do(b.internal, request{method: "GET", path: contract.PathOperatorAgents + "?limit=1&cursor=" + *page.NextCursor, token: opToken}))
	if len(page.Agents) != 1 || page.Agents[0].AgentID != agentB || page.NextCursor != nil {
		t.Fatalf("second page of agents: %+v", page)
	}
	armed := decodeBody[contract.AgentArmedPage](t, b.do(b.internal, request{method: "GET", path: "/api/operator/agents/" + agentA + "/armed?limit=2", token: opToken}))
	if armed.Total != 5 || len(armed.Armed) != 2 || armed.Armed[0].JobID != "job-4" || armed.Armed[1].JobID != "job-3" || armed.NextCursor == nil {
		t.Fatalf("armed, first page: %+v", armed)
	}
	armed = decodeBody[contract.AgentArmedPage](t, b.do(b.internal, request{method: "GET", path: "/api/operator/agents/" + agentA + "/armed?limit=2&cursor=" + *armed.NextCursor, token: opToken}))
	if len(armed.Armed) != 2 || armed.Armed[0].JobID != "job-2" {
		t.Fatalf("armed, second page: %+v", armed)
	}
	armed = decodeBody[contract.AgentArmedPage](t, b.do(b.internal, request{method: "GET", path: "/api/operator/agents/" + agentA + "/armed?job=JOB-1", token: opToken}))
	if armed.Total != 1 || armed.Armed[0].JobID != "job-1" || armed.NextCursor != nil {
		t.Fatalf("armed, searched: %+v", armed)
	}
	one := decodeBody[contract.OperatorAgent](t, b.do(b.internal, request{method: "GET", path: "/api/operator/agents/" + agentA, token: opToken}))
	if one.Agent.Armed != 5 || len(one.Recent) != 1 || one.Recent[0].LagSeconds != 0.02 {
		t.Fatalf("agent: %+v", one)
	}
}
