package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// unarmedServer serves NAS's internal handler with two jobs of two agents
// left unarmed an hour ago and one a moment ago.
func unarmedServer(t *testing.T) string {
	t.Helper()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	keys, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, _ := nas.NewStaticAgents(nil)
	svc, err := nas.New(nas.Options{
		Config: nas.Config{PublicURL: "https://nas.test", OperatorToken: unarmedOpToken, Relay: nas.RelayConfig{Secrets: []string{nasTestSecret}}},
		Engine: eng, Verifier: agents, Keys: keys, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	srv := httptest.NewServer(nashttp.NewServer(svc, nashttp.Options{}).InternalHandler())
	t.Cleanup(srv.Close)
	now := time.Now()
	for _, f := range []relay.LastFire{
		{AgentID: "agent-a", InstanceID: "inst-a", JobID: "nightly", ScheduleID: "sch-1", FireAt: now.Add(-time.Hour), Outcome: relay.LastFireDelivered, Reason: "agent answered 202 accepted", At: now.Add(-time.Hour)},
		{AgentID: "agent-b", InstanceID: "inst-b", JobID: "hourly", ScheduleID: "sch-2", FireAt: now.Add(-50 * time.Minute), Outcome: relay.LastFireInstanceStopped, Reason: "the operator stopped instance inst-b", At: now.Add(-50 * time.Minute)},
		{AgentID: "agent-a", InstanceID: "inst-a", JobID: "fresh", ScheduleID: "sch-3", FireAt: now, Outcome: relay.LastFireDelivered, At: now},
	} {
		if err := eng.RecordLastFire(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	}
	return srv.URL
}

// unarmedOpToken is the operator token of these tests: long enough for NAS,
// which refuses operator tokens shorter than 16 bytes.
const unarmedOpToken = "unarmed-operator-token-0123"

func TestNASUnarmedCLI(t *testing.T) {
	t.Parallel()
	url := unarmedServer(t)
	code, out, errOut := nasRunCLI(t, "nas", "unarmed", "--nas-url", url, "--operator-token", unarmedOpToken, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var resp contract.UnarmedResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("--json printed %q: %v", out, err)
	}
	var got []string
	for _, u := range resp.Unarmed {
		got = append(got, u.AgentID+"/"+u.JobID+":"+u.Outcome)
	}
	if strings.Join(got, " ") != "agent-a/nightly:delivered agent-b/hourly:instance_stopped" || resp.UnarmedAfter != "10m0s" {
		t.Fatalf("unarmed %v (%+v)", got, resp)
	}

	code, out, _ = nasRunCLI(t, "nas", "unarmed", "--nas-url", url, "--operator-token", unarmedOpToken, "--agent", "agent-b")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "AGENT") || !strings.Contains(lines[1], "hourly") ||
		!strings.Contains(lines[1], "instance_stopped") || !strings.Contains(lines[1], "50m") || strings.Contains(out, "nightly") {
		t.Fatalf("--agent agent-b: exit %d:\n%s", code, out)
	}
	code, out, errOut = nasRunCLI(t, "nas", "unarmed", "--nas-url", url, "--operator-token", unarmedOpToken, "--agent", "nobody")
	if code != exitFailure || out != "" || !strings.Contains(errOut, "not_found") || !strings.Contains(errOut, "NAS knows no agent nobody") {
		t.Fatalf("--agent nobody: exit %d: %q %q", code, out, errOut)
	}

	// --config takes the URL and the token from NAS's config file.
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "nas.yaml")
	nasWriteFile(t, filepath.Join(dir, "op"), unarmedOpToken+"\n")
	nasWriteFile(t, cfgPath, fmt.Sprintf("listen: 127.0.0.1:0\nrelay_listen: %s\npublic_url: https://nas.example.com\nagents_file: agents.yaml\noperator_token_file: op\nrelay:\n  secrets: [%s]\n",
		strings.TrimPrefix(url, "http://"), nasTestSecret))
	if code, out, errOut := nasRunCLI(t, "nas", "unarmed", "--config", cfgPath); code != 0 || !strings.Contains(out, "nightly") {
		t.Fatalf("--config: exit %d: %s %s", code, out, errOut)
	}

	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"nas", "unarmed", "--operator-token", unarmedOpToken}, exitUsage},                                            // no URL
		{[]string{"nas", "unarmed", "--nas-url", url}, exitUsage},                                                              // no token
		{[]string{"nas", "unarmed", "--nas-url", url, "--operator-token", "wrong"}, exitFailure},                               // 403
		{[]string{"nas", "unarmed", "--nas-url", "http://" + nasFreeAddr(t), "--operator-token", unarmedOpToken}, exitFailure}, // unreachable
		{[]string{"nas", "unarmed", "--nas-url", url, "--operator-token", unarmedOpToken, "extra"}, exitUsage},
		{[]string{"nas", "unarmed", "--bogus"}, exitUsage},
	} {
		if code, _, errOut := nasRunCLI(t, tc.args...); code != tc.want {
			t.Errorf("chronos %s: exit %d, want %d (%s)", strings.Join(tc.args, " "), code, tc.want, errOut)
		}
	}
}
