package sidecar_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/sidecar"
)

// TestRunServesTheLocalAPI: the agent serves its local API on its own
// listener, creates the admin token file (0600) at its first start, names
// the API in the serving record while it runs and withdraws it at stop.
func TestRunServesTheLocalAPI(t *testing.T) {
	t.Parallel()
	cfg := builtinConfig(t)
	ln, uiLn := listener(t), listener(t)
	n := newNotifier()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := start(ctx, sidecar.Options{Config: cfg, Logger: quiet(), Listener: ln, UIListener: uiLn, Notifier: n})
	n.awaitReady(t, done)

	rec, ok, err := provider.ReadServing(cfg.Home)
	if err != nil || !ok || rec.UI != "http://"+uiLn.Addr().String() || rec.PID != os.Getpid() {
		t.Fatalf("serving record %+v %v %v", rec, ok, err)
	}
	tokFile := filepath.Join(cfg.Home, localapi.TokenFile)
	st, err := os.Stat(tokFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	tok, err := localapi.ReadToken(tokFile)
	if err != nil || len(tok) != 64 {
		t.Fatalf("token %q %v", tok, err)
	}
	c, ok, err := localapi.Dial(cfg.Home)
	if err != nil || !ok {
		t.Fatalf("dial: %v %v", ok, err)
	}
	if _, err := c.AddJob(ctx, specEcho("ui-job")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(rec.UI + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	var report sidecar.Report
	err = json.NewDecoder(resp.Body).Decode(&report)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || report.Provider != provider.Builtin || report.Home != cfg.Home {
		t.Fatalf("status %d %+v %v", resp.StatusCode, report, err)
	}
	// The fire listener does not serve the local API.
	resp, err = http.Get("http://" + ln.Addr().String() + "/api/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("fire listener /api/jobs: %d", resp.StatusCode)
	}

	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	if rec, ok, _ := provider.ReadServing(cfg.Home); ok && rec.UI != "" {
		t.Fatalf("the stopped agent still names its UI: %+v", rec)
	}
	if _, ok, err := localapi.Dial(cfg.Home); ok || err != nil {
		t.Fatalf("dial after stop: %v %v", ok, err)
	}
	if _, err := http.Get("http://" + uiLn.Addr().String() + "/api/jobs"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("the UI listener still answers: %v", err)
	}
}

// specEcho is a daily job that echoes.
func specEcho(id string) agent.JobSpec {
	return agent.JobSpec{ID: id, Schedule: "@daily", Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: "echo " + id}}}
}
