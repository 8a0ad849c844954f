package agentcall_test

import (
	"testing"

	"github.com/chronoscron/chronos/agentcall"
)

// TestAgentDown: the answers that say the agent is not answering (no
// answer, 503, 408, 425, 429, a cold start) hold its fires; others do not.
func TestAgentDown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		res  agentcall.FireResult
		want bool
	}{
		{"no answer", agentcall.FireResult{Outcome: agentcall.OutcomeRetry, Reason: "agent timed out"}, true},
		{"refused connection", agentcall.FireResult{Outcome: agentcall.OutcomeRetry, ColdStart: true}, true},
		{"503", agentcall.ClassifyAnswer(503, "5", nil), true},
		{"408", agentcall.ClassifyAnswer(408, "", nil), true},
		{"425", agentcall.ClassifyAnswer(425, "", nil), true},
		{"429", agentcall.ClassifyAnswer(429, "", nil), true},
		{"500", agentcall.ClassifyAnswer(500, "", nil), false},
		{"401", agentcall.ClassifyAnswer(401, "", nil), false},
		{"202", agentcall.ClassifyAnswer(202, "", []byte(`{"status":"accepted"}`)), false},
	}
	for _, tc := range tests {
		if got := tc.res.AgentDown(); got != tc.want {
			t.Errorf("%s: AgentDown = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAtAttemptHint: a refused token is retried below the bound and
// rejected at it, the final reason ending with the hint.
func TestAtAttemptHint(t *testing.T) {
	t.Parallel()
	refused := agentcall.ClassifyAnswer(401, "", []byte(`{"error":"invalid_token"}`))
	if r := refused.AtAttemptHint(1, 3, "check the key"); r.Outcome != agentcall.OutcomeRetry {
		t.Fatalf("attempt 1 of 3: %+v", r)
	}
	r := refused.AtAttemptHint(3, 3, "check the key")
	if r.Outcome != agentcall.OutcomeRejected || r.Reason != "agent answered 401 invalid_token: the agent refused the fire token 3 times (relay.retry.max_auth_attempts); check the key" {
		t.Fatalf("attempt 3 of 3: %+v", r)
	}
	if ok := agentcall.ClassifyAnswer(202, "", nil).AtAttemptHint(9, 1, "x"); ok.Outcome != agentcall.OutcomeDelivered {
		t.Fatalf("a delivered answer changed: %+v", ok)
	}
}

// TestParseAllowlist: CIDRs, addresses and host names; a malformed entry
// is refused.
func TestParseAllowlist(t *testing.T) {
	t.Parallel()
	a, err := agentcall.ParseAllowlist([]string{"10.1.0.0/16", " 192.168.7.7 ", "Agents.Internal.", ""})
	if err != nil || len(a.Prefixes) != 2 || len(a.Hosts) != 1 || a.Hosts[0] != "agents.internal" {
		t.Fatalf("ParseAllowlist = %+v, %v", a, err)
	}
	if !(agentcall.Policy{Allow: a}).AllowedHost("AGENTS.internal") {
		t.Fatal("an allowlisted host was not allowed")
	}
	for _, bad := range []string{"10.0.0.0/33", "agents internal", "a:b"} {
		if _, err := agentcall.ParseAllowlist([]string{bad}); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
