package nashttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// deadLetterOf arms job of agentID (instance instanceID) due now, claims it
// and kills it; it returns the schedule id.
func (b *bundle) deadLetterOf(t *testing.T, agentID, instanceID, job string) string {
	t.Helper()
	ctx := context.Background()
	req := armRequest(b, job, time.Now().Add(-time.Second))
	req.AgentID, req.InstanceID, req.ScheduleID = agentID, instanceID, "sch-"+agentID+"-"+job
	if _, err := b.engine.Arm(ctx, req); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		leases, err := b.engine.Claim(ctx, 10, time.Minute, relay.Flow{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range leases {
			if err := b.engine.Kill(ctx, l, "agent answered 404"); err != nil {
				t.Fatal(err)
			}
			found = found || l.ScheduleID == req.ScheduleID
		}
		if found {
			return req.ScheduleID
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never claimed", req.ScheduleID)
	return ""
}

// TestNASOperatorRefusesUnknownIDs: every operator route that takes an
// agent or instance id answers 404 not_found, with the id named, for an id
// NAS does not know, and changes nothing; known ids (in the agents file, or
// known to the store only) are served as before.
func TestNASOperatorRefusesUnknownIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.deadLetter(t, "dead")
	// An instance the agents file does not list but whose agent armed a
	// fire through NAS (a JWT agent naming its instance).
	if err := b.engine.SetInstanceCallback(ctx, "inst-jwt", b.agent.URL()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path string
		body               any
		known              bool
	}{
		{"stop an unknown instance", "POST", "/api/operator/instances/no-such-instance/stop", nil, false},
		{"start an unknown instance", "POST", "/api/operator/instances/no-such-instance/start", nil, false},
		{"cancel-all of an unknown agent", "POST", "/api/operator/agents/ghost/cancel-all", nil, false},
		{"disable an unknown agent", "POST", "/api/operator/agents/ghost/disable", nil, false},
		{"enable an unknown agent", "POST", "/api/operator/agents/ghost/enable", nil, false},
		{"rekey an unknown agent", "POST", "/api/operator/agents/ghost/rekey", nil, false},
		{"dead letter of an unknown agent", "GET", contract.PathOperatorDLQ + "?agent_id=ghost", nil, false},
		{"unarmed jobs of an unknown agent", "GET", contract.PathOperatorUnarmed + "?agent=ghost", nil, false},
		{"replay of an unknown agent", "POST", contract.PathOperatorDLQReplay, contract.DLQReplayRequest{AgentID: "ghost"}, false},
		{"replay of an unknown schedule id", "POST", contract.PathOperatorDLQReplay, contract.DLQReplayRequest{ScheduleIDs: []string{"sch_nonexistent"}}, false},

		{"stop an instance of the agents file", "POST", "/api/operator/instances/" + instanceB + "/stop", nil, true},
		{"stop an instance the store knows", "POST", "/api/operator/instances/inst-jwt/stop", nil, true},
		{"cancel-all of a known agent with nothing armed", "POST", "/api/operator/agents/" + agentB + "/cancel-all", nil, true},
		{"dead letter of a known agent with none", "GET", contract.PathOperatorDLQ + "?agent_id=" + agentB, nil, true},
		{"unarmed jobs of a known agent", "GET", contract.PathOperatorUnarmed + "?agent=" + agentB, nil, true},
		{"replay of a known agent with none", "POST", contract.PathOperatorDLQReplay, contract.DLQReplayRequest{AgentID: agentB}, true},
	}
	for _, tt := range tests {
		rec := b.do(b.internal, request{method: tt.method, path: tt.path, token: opToken, body: tt.body})
		switch {
		case tt.known && rec.Code != http.StatusOK:
			t.Errorf("%s: %d %s, want 200", tt.name, rec.Code, rec.Body)
		case !tt.known && (rec.Code != http.StatusNotFound || errCode(t, rec) != contract.CodeNotFound):
			t.Errorf("%s: %d %s, want 404 not_found", tt.name, rec.Code, rec.Body)
		case !tt.known:
			e := decodeBody[contract.Error](t, rec)
			if !strings.Contains(e.Description, "ghost") && !strings.Contains(e.Description, "no-such-instance") && !strings.Contains(e.Description, "sch_nonexistent") {
				t.Errorf("%s: %q does not name the id", tt.name, e.Description)
			}
		}
	}

	// Nothing of the unknown ids was written: the stopped instances are
	// the two known ones, and the unknown one is not stopped.
	if stopped, err := b.engine.InstanceStopped(ctx, "no-such-instance"); err != nil || stopped {
		t.Fatalf("unknown instance stopped: %v %v", stopped, err)
	}
	ov := decodeBody[contract.OperatorOverview](t, b.do(b.internal, request{method: "GET", path: contract.PathOperatorOverview, token: opToken}))
	var ids []string
	for _, s := range ov.StoppedInstances {
		ids = append(ids, s.InstanceID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{instanceB, "inst-jwt"}) {
		t.Fatalf("stopped instances %v, want %v", ids, []string{instanceB, "inst-jwt"})
	}
	// A stopped instance can always be started again.
	if rec := b.do(b.internal, request{method: "POST", path: "/api/operator/instances/inst-jwt/start", token: opToken}); rec.Code != http.StatusOK {
		t.Fatalf("start: %d %s", rec.Code, rec.Body)
	}
}

// TestNASOperatorReplayReportsEveryEntry: a replay answers with every entry
// it took out of the dead letter, replayed or dropped with the reason (two
// of agent A's three entries whose jobs were armed again since); a replay
// naming an unknown schedule id among several agents' entries is 404 and
// replays none of them.
func TestNASOperatorReplayReportsEveryEntry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a1 := b.deadLetterOf(t, agentA, instanceA, "j1")
	a2 := b.deadLetterOf(t, agentA, instanceA, "j2")
	a3 := b.deadLetterOf(t, agentA, instanceA, "j3")
	b1 := b.deadLetterOf(t, agentB, instanceB, "j1")
	b2 := b.deadLetterOf(t, agentB, instanceB, "j2")
	// Agent A moved on: it armed j2 and j3 again for later slots.
	for _, job := range []string{"j2", "j3"} {
		b.provision(tokenA, job, time.Now().Add(time.Hour))
	}
	listed := func() []string {
		t.Helper()
		var ids []string
		for _, e := range decodeBody[contract.DLQListResponse](t, b.do(b.internal, request{method: "GET", path: contract.PathOperatorDLQ, token: opToken})).Entries {
			ids = append(ids, e.ScheduleID)
		}
		slices.Sort(ids)
		return ids
	}
	replay := func(req contract.DLQReplayRequest) *httptest.ResponseRecorder {
		return b.do(b.internal, request{method: "POST", path: contract.PathOperatorDLQReplay, token: opToken, body: req})
	}

	rec := replay(contract.DLQReplayRequest{ScheduleIDs: []string{b1, "sch_nonexistent", a1}})
	if rec.Code != http.StatusNotFound || errCode(t, rec) != contract.CodeNotFound || !strings.Contains(rec.Body.String(), "sch_nonexistent") {
		t.Fatalf("replay with an unknown id: %d %s", rec.Code, rec.Body)
	}
	if got := listed(); len(got) != 5 {
		t.Fatalf("after a refused replay the dead letter holds %v, want all five", got)
	}

	rec = replay(contract.DLQReplayRequest{AgentID: agentA})
	got := decodeBody[contract.DLQReplayResponse](t, rec)
	if rec.Code != http.StatusOK || got.Replayed != 1 || len(got.Entries) != 1 || got.Entries[0].ScheduleID != a1 || got.Entries[0].JobID != "j1" {
		t.Fatalf("replay of agent A: %d %s", rec.Code, rec.Body)
	}
	dropped := map[string]contract.DLQDropped{}
	for _, d := range got.Dropped {
		dropped[d.ScheduleID] = d
	}
	for id, job := range map[string]string{a2: "j2", a3: "j3"} {
		d, ok := dropped[id]
		if !ok || d.JobID != job || d.AgentID != agentA || d.Reason != contract.DLQDropJobArmedAgain || d.Description == "" {
			t.Fatalf("entry %s (%s) not reported dropped with its reason: %s", id, job, rec.Body)
		}
	}
	if len(got.Dropped) != 2 || len(got.Missing) != 0 {
		t.Fatalf("replay of agent A: %s", rec.Body)
	}
	if got := listed(); !slices.Equal(got, []string{b1, b2}) {
		t.Fatalf("dead letter after agent A's replay: %v", got)
	}
	for job, want := range map[string]bool{"j1": true, "j2": true, "j3": true} {
		if _, err := b.engine.Get(context.Background(), agentA, job); (err == nil) != want {
			t.Fatalf("agent A's %s armed: %v", job, err)
		}
	}

	rec = replay(contract.DLQReplayRequest{ScheduleIDs: []string{b1, b2, b1}})
	if got := decodeBody[contract.DLQReplayResponse](t, rec); rec.Code != http.StatusOK || got.Replayed != 2 || len(got.Dropped) != 0 {
		t.Fatalf("replay of agent B's entries: %d %s", rec.Code, rec.Body)
	}
	if got := listed(); len(got) != 0 {
		t.Fatalf("dead letter after every replay: %v", got)
	}
}
