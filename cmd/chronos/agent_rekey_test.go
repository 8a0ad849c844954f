package main

import (
	"context"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/contract"
)

// TestAgentRekeyCLI runs chronos agent rekey against NAS's operator route:
// it says what it did, in text and JSON, and the store holds the agent's
// rekey floor; an unknown agent and a bad id fail without setting one.
func TestAgentRekeyCLI(t *testing.T) {
	t.Parallel()
	url, _, eng := nasOperatorServer(t) // agent-a has a dead letter: NAS knows it
	ctx := context.Background()
	conn := []string{"--nas-url", url, "--operator-token", nasOpToken}
	cli := func(args ...string) (int, string, string) { return nasRunCLI(t, append(args, conn...)...) }

	code, out, errOut := cli("agent", "rekey", "agent-a")
	if code != exitOK || !strings.HasPrefix(out, "agent agent-a re-keyed at ") || !strings.Contains(out, "new cron keys") {
		t.Fatalf("agent rekey: exit %d %q %s", code, out, errOut)
	}
	floor, err := eng.RekeyFloor(ctx, "agent-a")
	if err != nil || floor.IsZero() {
		t.Fatalf("rekey floor after the rekey: %s (%v)", floor, err)
	}
	code, out, errOut = cli("agent", "rekey", "agent-a", "--json")
	var r contract.AgentRekeyResponse
	if err := decodeOne(out, &r); code != exitOK || err != nil || r.AgentID != "agent-a" || r.RekeyedAt.Before(floor) {
		t.Fatalf("agent rekey --json: exit %d %q %s", code, out, errOut)
	}

	for _, tt := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{name: "unknown agent", args: append([]string{"agent", "rekey", "ghost"}, conn...), code: exitFailure, err: "not_found"},
		{name: "id too long", args: append([]string{"agent", "rekey", strings.Repeat("x", 300)}, conn...), code: exitUsage, err: "invalid_request"},
		{name: "two ids", args: append([]string{"agent", "rekey", "a", "b"}, conn...), code: exitUsage},
		{name: "no id", args: append([]string{"agent", "rekey"}, conn...), code: exitUsage},
		{name: "wrong token", args: []string{"agent", "rekey", "agent-a", "--nas-url", url, "--operator-token", "wrong-token-of-16-bytes"}, code: exitFailure, err: "403"},
	} {
		code, out, errOut := nasRunCLI(t, tt.args...)
		if code != tt.code || out != "" || !strings.HasPrefix(errOut, "chronos: ") || !strings.Contains(errOut, tt.err) {
			t.Errorf("%s: exit %d %q %q, want exit %d naming %q", tt.name, code, out, errOut, tt.code, tt.err)
		}
	}
	if f, err := eng.RekeyFloor(ctx, "ghost"); err != nil || !f.IsZero() {
		t.Fatalf("the unknown agent got a rekey floor: %s %v", f, err)
	}
}
