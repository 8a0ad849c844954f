package main

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay/memory"
)

// armNAS serves NAS's agent API for one agent with token.
func armNAS(t *testing.T, token string) string {
	t.Helper()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	keys, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "arm-agent", InstanceID: "inst-arm", TokenSHA256: nas.TokenSHA256(token)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	svc, err := nas.New(nas.Options{
		Config: nas.Config{PublicURL: "http://" + srv.Listener.Addr().String(), AllowPrivateCallbacks: true, Relay: nas.RelayConfig{Secrets: []string{nasTestSecret}}},
		Engine: eng, Verifier: agents, Keys: keys, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	srv.Config.Handler = nashttp.NewServer(svc, nashttp.Options{}).Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// clearAgentEnv runs the test as a shell without the agent's variables.
func clearAgentEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{envAgentConfig, envHome, "CHRONOS_TIMEZONE"} {
		t.Setenv(k, "")
		_ = os.Unsetenv(k)
	}
}

// TestJobsArmThroughServingAgent: an agent started from agent.yaml records
// its config in its home; jobs add, edit and pause with --home alone, no
// CHRONOS_AGENT_CONFIG, take the zone of that config, arm through it at NAS
// and say so; a slot beyond NAS's horizon is shown with the refresh fire
// that arms it; with no record the CLI says nothing will arm the job.
func TestJobsArmThroughServingAgent(t *testing.T) {
	clearAgentEnv(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	url := armNAS(t, "arm-agent-token")
	cfgPath := filepath.Join(dir, "agent.yaml")
	writeFile(t, cfgPath, agentYAML(home, url, "http://127.0.0.1:1", "agent:inst-arm")+"timezone: Europe/Paris\n")
	writeFile(t, filepath.Join(dir, "token"), "arm-agent-token\n")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := provider.RecordServing(home, cfgPath, time.Now()); err != nil {
		t.Fatal(err)
	}

	out := mustCLI(t, "jobs", "add", "--home", home, "--id", "brief", "--schedule", "0 9 * * *", "--", "true")
	if !strings.Contains(out, "armed at NAS through the agent of "+cfgPath+" for ") || !strings.Contains(out, "T09:00:00+0") {
		t.Fatalf("add does not say it armed through the serving agent:\n%s", out)
	}
	var j agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, "brief", "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.Timezone != "Europe/Paris" {
		t.Fatalf("job zone %q, want the serving agent's Europe/Paris", j.Timezone)
	}
	armedAt := func(id string) time.Time {
		t.Helper()
		st, err := provider.ReadState(home)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range st.Armed {
			if a.JobID == id {
				return a.FireAt
			}
		}
		return time.Time{}
	}
	if got := armedAt("brief"); !got.Equal(*j.NextRunAt) {
		t.Fatalf("armed %s, want next_run_at %s", got, j.NextRunAt)
	}

	out = mustCLI(t, "jobs", "edit", "--home", home, "brief", "--schedule", "30 10 * * *")
	if !strings.Contains(out, "edited job brief") || !strings.Contains(out, "T10:30:00+0") || !strings.Contains(out, "armed at NAS") {
		t.Fatalf("edit:\n%s", out)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	if got := armedAt("brief"); got.In(paris).Hour() != 10 || got.Minute() != 30 {
		t.Fatalf("after edit armed %s, want 10:30 Paris", got)
	}

	out = mustCLI(t, "jobs", "add", "--home", home, "--id", "leap", "--schedule", "0 0 29 2 *", "--", "true")
	if !strings.Contains(out, "-02-29T00:00:00+01:00") || !strings.Contains(out, "beyond NAS's horizon") ||
		!strings.Contains(out, "refresh fire at") || strings.Contains(out, "NOT") {
		t.Fatalf("a slot beyond the horizon is not shown armed through a refresh:\n%s", out)
	}
	if got := armedAt("leap"); got.IsZero() || time.Until(got) > provider.DefaultHorizon {
		t.Fatalf("leap armed at %s, want a refresh fire within the horizon", got)
	}

	out = mustCLI(t, "jobs", "pause", "--home", home, "brief")
	if !strings.Contains(out, "NAS updated through the agent of "+cfgPath) || !armedAt("brief").IsZero() {
		t.Fatalf("pause did not disarm through the serving agent:\n%s", out)
	}

	if err := os.Remove(filepath.Join(home, provider.ServingFile)); err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, "jobs", "add", "--home", home, "--id", "lonely", "--schedule", "@daily", "--", "true")
	if !strings.Contains(out, "nothing will arm this change until the agent next starts") {
		t.Fatalf("add with no known agent:\n%s", out)
	}
}
