package nashttp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
)

// deadLetter arms job of agent A due now, claims it and kills it.
func (b *bundle) deadLetter(t *testing.T, job string) string {
	t.Helper()
	ctx := context.Background()
	res, err := b.engine.Arm(ctx, armRequest(b, job, time.Now().Add(-time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	leases, err := b.engine.Claim(ctx, 10, time.Minute, relay.Flow{})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v %d", err, len(leases))
	}
	if err := b.engine.Kill(ctx, leases[0], "agent answered 404"); err != nil {
		t.Fatal(err)
	}
	return res.OneShot.ScheduleID
}

func TestNASOperator(t *testing.T) {
	t.Parallel()
	stop := "/api/operator/instances/" + instanceA + "/stop"
	start := "/api/operator/instances/" + instanceA + "/start"
	cancelAll := "/api/operator/agents/" + agentA + "/cancel-all"
	tests := []struct {
		name   string
		opts   []setupOpt
		req    request
		status int
		code   string
		check  func(t *testing.T, b *bundle, sch string)
	}{
		{name: "stop", req: request{method: "POST", path: stop, token: opToken}, status: 200, check: func(t *testing.T, b *bundle, _ string) {
			if s, _ := b.engine.InstanceStopped(context.Background(), instanceA); !s {
				t.Fatal("instance not stopped")
			}
		}},
		{name: "start", req: request{method: "POST", path: start, token: opToken}, status: 200, check: func(t *testing.T, b *bundle, _ string) {
			if s, _ := b.engine.InstanceStopped(context.Background(), instanceA); s {
				t.Fatal("instance stopped")
			}
		}},
		{name: "stop without token", req: request{method: "POST", path: stop}, status: 401, code: contract.CodeUnauthenticated},
		{name: "stop with a wrong token", req: request{method: "POST", path: stop, token: "guess"}, status: 403, code: contract.CodeForbidden},
		{name: "an agent token is not an operator token", req: request{method: "POST", path: start, token: tokenA}, status: 403, code: contract.CodeForbidden},
		{name: "stop with the store down", opts: []setupOpt{withBrokenEngine}, req: request{method: "POST", path: stop, token: opToken}, status: 500, code: contract.CodeServerError},
		{name: "stop with an overlong id", req: request{method: "POST", path: "/api/operator/instances/" + strings.Repeat("i", 300) + "/stop", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "cancel all with an overlong id", req: request{method: "POST", path: "/api/operator/agents/" + strings.Repeat("a", 300) + "/cancel-all", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "cancel all", req: request{method: "POST", path: cancelAll, token: opToken}, status: 200, check: func(t *testing.T, b *bundle, _ string) {
			if _, err := b.engine.Get(context.Background(), agentA, "live"); err == nil {
				t.Fatal("job survived cancel-all")
			}
			if _, err := b.engine.Get(context.Background(), agentB, "live"); err != nil {
				t.Fatal("cancel-all touched another agent")
			}
		}},
		{name: "cancel all without token", req: request{method: "POST", path: cancelAll}, status: 401, code: contract.CodeUnauthenticated},
		{name: "cancel all wrong token", req: request{method: "POST", path: cancelAll, token: "x"}, status: 403, code: contract.CodeForbidden},
		{name: "cancel all store down", opts: []setupOpt{withBrokenEngine}, req: request{method: "POST", path: cancelAll, token: opToken}, status: 500, code: contract.CodeServerError},
		{name: "dlq list", req: request{method: "GET", path: contract.PathOperatorDLQ + "?agent_id=" + agentA, token: opToken}, status: 200, check: nil},
		{name: "dlq list bad limit", req: request{method: "GET", path: contract.PathOperatorDLQ + "?limit=0", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "dlq list without token", req: request{method: "GET", path: contract.PathOperatorDLQ}, status: 401, code: contract.CodeUnauthenticated},
		{name: "dlq list wrong token", req: request{method: "GET", path: contract.PathOperatorDLQ, token: "x"}, status: 403, code: contract.CodeForbidden},
		{name: "dlq list store down", opts: []setupOpt{withBrokenEngine}, req: request{method: "GET", path: contract.PathOperatorDLQ, token: opToken}, status: 500, code: contract.CodeServerError},
		{name: "replay by agent", req: request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: contract.DLQReplayRequest{AgentID: agentA}}, status: 200,
			check: func(t *testing.T, b *bundle, _ string) {
				if _, err := b.engine.Get(context.Background(), agentA, "dead"); err != nil {
					t.Fatalf("replayed job not armed: %v", err)
				}
			}},
		{name: "replay nothing", req: request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: `{}`, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "replay both", req: request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: contract.DLQReplayRequest{AgentID: agentA, ScheduleIDs: []string{"x"}}}, status: 400, code: contract.CodeInvalidRequest},
		{name: "replay unknown field", req: request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: `{"agent":"a"}`, invalid: true}, status: 400, code: contract.CodeUnknownField},
		{name: "replay too large", req: request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: `{"agent_id":"` + string(make([]byte, 70<<10)) + `"}`, invalid: true}, status: 413, code: contract.CodeBodyTooLarge},
		{name: "replay content type", req: request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: `{}`, header: map[string]string{"Content-Type": "text/plain"}, invalid: true}, status: 415, code: contract.CodeUnsupportedMediaType},
		{name: "replay without token", req: request{method: "POST", path: contract.PathOperatorDLQReplay, body: contract.DLQReplayRequest{AgentID: agentA}}, status: 401, code: contract.CodeUnauthenticated},
		{name: "replay wrong token", req: request{method: "POST", path: contract.PathOperatorDLQReplay, token: "x", body: contract.DLQReplayRequest{AgentID: agentA}}, status: 403, code: contract.CodeForbidden},
		{name: "replay store down", opts: []setupOpt{withBrokenEngine}, req: request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: contract.DLQReplayRequest{ScheduleIDs: []string{"x"}}}, status: 500, code: contract.CodeServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.opts...)
			sch := ""
			if len(tt.opts) == 0 {
				sch = b.deadLetter(t, "dead")
				for _, tok := range []string{tokenA, tokenB} {
					b.provision(tok, "live", time.Now().Add(time.Hour))
				}
			}
			rec := b.do(b.internal, tt.req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.code != "" && errCode(t, rec) != tt.code {
				t.Fatalf("%s, want %s", rec.Body, tt.code)
			}
			if tt.check != nil {
				tt.check(t, b, sch)
			}
		})
	}
}

func TestNASOperatorDLQFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sch := b.deadLetter(t, "dead")
	rec := b.do(b.internal, request{method: "GET", path: contract.PathOperatorDLQ, token: opToken})
	list := decodeBody[contract.DLQListResponse](t, rec)
	if len(list.Entries) != 1 || list.Entries[0].ScheduleID != sch || list.Entries[0].AgentID != agentA || list.NextCursor != nil {
		t.Fatalf("dlq %+v", list)
	}
	rec = b.do(b.internal, request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: contract.DLQReplayRequest{ScheduleIDs: []string{sch, "unknown"}}})
	if rec.Code != 404 || errCode(t, rec) != contract.CodeNotFound {
		t.Fatalf("replay with an unknown id: %d %s", rec.Code, rec.Body)
	}
	rec = b.do(b.internal, request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: contract.DLQReplayRequest{ScheduleIDs: []string{sch}}})
	if got := decodeBody[contract.DLQReplayResponse](t, rec); got.Replayed != 1 || len(got.Entries) != 1 || got.Entries[0].ScheduleID != sch {
		t.Fatalf("replay: %s", rec.Body)
	}
	row, err := b.engine.Get(context.Background(), agentA, "dead")
	if err != nil || row.State != relay.StateArmed {
		t.Fatalf("replayed row %+v %v", row, err)
	}
}

func TestNASOperatorDisabled(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *nas.Config, _ *nas.Options) { c.OperatorToken = "" })
	// Without an operator token the routes do not exist at all: any token is
	// a 404, as the description documents.
	for _, r := range []request{
		{method: "POST", path: "/api/operator/instances/x/stop", token: opToken},
		{method: "POST", path: "/api/operator/instances/x/start", token: opToken},
		{method: "POST", path: "/api/operator/agents/a/cancel-all", token: opToken},
		{method: "GET", path: contract.PathOperatorDLQ},
		{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: contract.DLQReplayRequest{AgentID: "a"}},
	} {
		rec := b.do(b.internal, r)
		if rec.Code != 404 || errCode(t, rec) != contract.CodeNotFound {
			t.Fatalf("%s: %d %s", r.path, rec.Code, rec.Body)
		}
	}
}
