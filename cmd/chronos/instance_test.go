package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// TestInstanceAndCancelAllCLI runs chronos instance stop|start and chronos
// agent cancel-all against NAS's operator routes and checks what NAS's store
// holds after each, in text and in JSON.
func TestInstanceAndCancelAllCLI(t *testing.T) {
	t.Parallel()
	url, _, eng := nasOperatorServer(t)
	ctx := context.Background()
	conn := []string{"--nas-url", url, "--operator-token", nasOpToken}
	cli := func(args ...string) (int, string, string) { return nasRunCLI(t, append(args, conn...)...) }
	// NAS knows inst-7: its agent armed a fire through NAS.
	if err := eng.SetInstanceCallback(ctx, "inst-7", "https://agent.example.com"); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := cli("instance", "stop", "inst-7")
	if stopped, err := eng.InstanceStopped(ctx, "inst-7"); code != exitOK || err != nil || !stopped ||
		out != "instance inst-7 stopped: its fires are dropped until it is started\n" {
		t.Fatalf("instance stop: exit %d %q %s; stopped %v %v", code, out, errOut, stopped, err)
	}
	code, out, errOut = cli("instance", "stop", "inst-7", "--json") // idempotent
	var st contract.InstanceStateResponse
	if err := decodeOne(out, &st); code != exitOK || err != nil || st != (contract.InstanceStateResponse{InstanceID: "inst-7", Stopped: true}) {
		t.Fatalf("instance stop --json: exit %d %q %s", code, out, errOut)
	}
	code, out, errOut = cli("instance", "start", "inst-7", "--json")
	if err := json.Unmarshal([]byte(out), &st); code != exitOK || err != nil || st != (contract.InstanceStateResponse{InstanceID: "inst-7"}) {
		t.Fatalf("instance start --json: exit %d %q %s", code, out, errOut)
	}
	if stopped, err := eng.InstanceStopped(ctx, "inst-7"); err != nil || stopped {
		t.Fatalf("after start: stopped %v %v", stopped, err)
	}
	if code, out, _ = cli("instance", "start", "inst-7"); code != exitOK || !strings.Contains(out, "instance inst-7 started") {
		t.Fatalf("instance start: exit %d %q", code, out)
	}

	for _, job := range []string{"a", "b"} {
		if _, err := eng.Arm(ctx, relay.ArmRequest{AgentID: "agent-c", InstanceID: "i", JobID: job, FireAt: time.Now().Add(time.Hour), CallbackURL: "https://agent.example.com", ScheduleID: "sch-c-" + job}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = cli("agent", "cancel-all", "agent-c", "--json")
	var ca contract.CancelAllResponse
	if err := decodeOne(out, &ca); code != exitOK || err != nil || ca != (contract.CancelAllResponse{AgentID: "agent-c", Cancelled: 2}) {
		t.Fatalf("cancel-all --json: exit %d %q %s", code, out, errOut)
	}
	if _, err := eng.Get(ctx, "agent-c", "a"); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("job a still armed after cancel-all: %v", err)
	}
	// agent-a has nothing armed but a dead letter: NAS knows it.
	if code, out, _ = cli("agent", "cancel-all", "agent-a"); code != exitOK || out != "cancelled 0 armed fires of agent agent-a\n" {
		t.Fatalf("cancel-all of an agent with nothing armed: exit %d %q", code, out)
	}

	long := strings.Repeat("x", 300)
	for _, args := range [][]string{
		append([]string{"instance", "stop", long}, conn...),      // NAS answers 400
		append([]string{"agent", "cancel-all", long}, conn...),   // NAS answers 400
		append([]string{"instance", "stop", "a", "b"}, conn...),  // two ids
		append([]string{"instance", "stop", "--bogus"}, conn...), // no such flag
		{"instance", "pause", "inst-7"},                          // no such command
	} {
		if code, out, errOut := nasRunCLI(t, args...); code != exitUsage || out != "" || !strings.HasPrefix(errOut, "chronos: ") {
			t.Errorf("chronos %.60s: exit %d %q %q, want 2", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, out, errOut := nasRunCLI(t, "agent", "cancel-all", "agent-c", "--nas-url", url, "--operator-token", "wrong-token-of-16-bytes"); code != exitFailure ||
		out != "" || !strings.Contains(errOut, "403") {
		t.Errorf("wrong token: exit %d %q %s", code, out, errOut)
	}
	if code, _, errOut := nasRunCLI(t, "instance", "stop", "x", "--nas-url", "http://"+nasFreeAddr(t), "--operator-token", nasOpToken); code != exitFailure ||
		!strings.Contains(errOut, "instance stop") {
		t.Errorf("unreachable NAS: exit %d %s", code, errOut)
	}
}

// TestOperatorCLIRefusesUnknownIDs: instance stop|start, agent cancel-all,
// disable, enable and rekey, dlq list|replay and nas unarmed exit 1 naming
// the id NAS does not know, and nothing changes: the made-up instance is not
// stopped.
func TestOperatorCLIRefusesUnknownIDs(t *testing.T) {
	t.Parallel()
	url, _, eng := nasOperatorServer(t)
	conn := []string{"--nas-url", url, "--operator-token", nasOpToken}
	for _, args := range [][]string{
		{"instance", "stop", "no-such-instance"},
		{"instance", "start", "no-such-instance"},
		{"agent", "cancel-all", "ghost"},
		{"agent", "disable", "ghost"},
		{"agent", "enable", "ghost"},
		{"agent", "rekey", "ghost"},
		{"dlq", "list", "--agent", "ghost"},
		{"dlq", "replay", "--agent", "ghost"},
		{"dlq", "replay", "sch_nonexistent"},
		{"nas", "unarmed", "--agent", "ghost"},
	} {
		code, out, errOut := nasRunCLI(t, append(args, conn...)...)
		id := args[len(args)-1]
		if code != exitFailure || out != "" || !strings.Contains(errOut, "404: not_found") || !strings.Contains(errOut, id) {
			t.Errorf("chronos %s: exit %d %q %q, want exit 1 naming %s", strings.Join(args, " "), code, out, errOut, id)
		}
	}
	if stopped, err := eng.InstanceStopped(context.Background(), "no-such-instance"); err != nil || stopped {
		t.Fatalf("the unknown instance is stopped: %v %v", stopped, err)
	}
	if info, err := eng.Instance(context.Background(), "no-such-instance"); err != nil || !info.StoppedAt.IsZero() || !info.StartedAt.IsZero() {
		t.Fatalf("the unknown instance was recorded: %+v %v", info, err)
	}
}
