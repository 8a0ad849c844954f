package main

import (
	"context"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// TestAgentDisableEnableCLI runs chronos agent disable|enable against NAS's
// operator routes: each says what it did, in text and JSON, and the store
// holds it; an unknown agent and a bad id fail without changing anything.
func TestAgentDisableEnableCLI(t *testing.T) {
	t.Parallel()
	url, _, eng := nasOperatorServer(t) // agent-a has a dead letter: NAS knows it
	ctx := context.Background()
	conn := []string{"--nas-url", url, "--operator-token", nasOpToken}
	cli := func(args ...string) (int, string, string) { return nasRunCLI(t, append(args, conn...)...) }
	disabled := func() bool {
		t.Helper()
		fl, err := eng.AgentFlow(ctx, "agent-a")
		if err != nil {
			t.Fatal(err)
		}
		return fl.Policy.Disabled
	}

	code, out, errOut := cli("agent", "disable", "agent-a")
	if code != exitOK || !disabled() ||
		out != "agent agent-a disabled: NAS holds its fires and refuses its calls until it is enabled\n" {
		t.Fatalf("agent disable: exit %d %q %s; disabled %v", code, out, errOut, disabled())
	}
	code, out, errOut = cli("agent", "disable", "agent-a", "--json") // idempotent
	var st contract.AgentStateResponse
	if err := decodeOne(out, &st); code != exitOK || err != nil || st != (contract.AgentStateResponse{AgentID: "agent-a", Disabled: true}) {
		t.Fatalf("agent disable --json: exit %d %q %s", code, out, errOut)
	}
	code, out, errOut = cli("agent", "enable", "agent-a", "--json")
	if err := decodeOne(out, &st); code != exitOK || err != nil || st != (contract.AgentStateResponse{AgentID: "agent-a"}) || disabled() {
		t.Fatalf("agent enable --json: exit %d %q %s; disabled %v", code, out, errOut, disabled())
	}
	if code, out, _ = cli("agent", "enable", "agent-a"); code != exitOK || !strings.HasPrefix(out, "agent agent-a enabled: its held fires go out") {
		t.Fatalf("agent enable: exit %d %q", code, out)
	}

	tests := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{name: "unknown agent", args: append([]string{"agent", "disable", "ghost"}, conn...), code: exitFailure, err: "404"},
		{name: "unknown agent enable", args: append([]string{"agent", "enable", "ghost"}, conn...), code: exitFailure, err: "not_found"},
		{name: "id too long", args: append([]string{"agent", "disable", strings.Repeat("x", 300)}, conn...), code: exitUsage, err: "invalid_request"},
		{name: "two ids", args: append([]string{"agent", "disable", "a", "b"}, conn...), code: exitUsage},
		{name: "no id", args: append([]string{"agent", "enable"}, conn...), code: exitUsage},
		{name: "wrong token", args: []string{"agent", "disable", "agent-a", "--nas-url", url, "--operator-token", "wrong-token-of-16-bytes"}, code: exitFailure, err: "403"},
		{name: "no NAS named", args: []string{"agent", "disable", "agent-a"}, code: exitUsage, err: "--nas-url"},
	}
	for _, tt := range tests {
		code, out, errOut := nasRunCLI(t, tt.args...)
		if code != tt.code || out != "" || !strings.HasPrefix(errOut, "chronos: ") || !strings.Contains(errOut, tt.err) {
			t.Errorf("%s: exit %d %q %q, want exit %d naming %q", tt.name, code, out, errOut, tt.code, tt.err)
		}
	}
	if fl, err := eng.AgentFlow(ctx, "ghost"); err != nil || fl.Policy != (relay.AgentPolicy{}) {
		t.Fatalf("the unknown agent got a policy: %+v %v", fl, err)
	}
	if disabled() {
		t.Fatal("a refused call disabled agent-a")
	}
}
