package sidecar_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	req, err := http.NewRequest(http.MethodGet, rec.UI+"/api/status", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
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

// uiGet sends GET path to the agent's local API at base with Host host
// and the bearer token tok (none when empty) and returns the status and
// body.
func uiGet(t *testing.T, base, path, host, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestLocalAPIRefusesForeignHostsAndAnonymousReads: the agent's real
// listener refuses a request with a foreign Host (DNS rebinding) with 421
// even with the token, answers a read without the token 401, serves its
// own address, localhost and the ui_hosts names with the token, and
// answers a job's env values only when revealed.
func TestLocalAPIRefusesForeignHostsAndAnonymousReads(t *testing.T) {
	t.Parallel()
	cfg := builtinConfig(t)
	cfg.UIHosts = []string{"chronos.internal"}
	ln, uiLn := listener(t), listener(t)
	n := newNotifier()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := start(ctx, sidecar.Options{Config: cfg, Logger: quiet(), Listener: ln, UIListener: uiLn, Notifier: n})
	n.awaitReady(t, done)
	c, ok, err := localapi.Dial(cfg.Home)
	if err != nil || !ok {
		t.Fatalf("dial: %v %v", ok, err)
	}
	tok, err := localapi.ReadToken(filepath.Join(cfg.Home, localapi.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	spec := specEcho("secretive")
	spec.Payload.Shell.Env = map[string]string{"DB_PASSWORD": "hunter2"}
	if _, err := c.AddJob(ctx, spec); err != nil {
		t.Fatal(err)
	}
	base := "http://" + uiLn.Addr().String()
	_, port, _ := net.SplitHostPort(uiLn.Addr().String())

	for _, tc := range []struct {
		name, path, host, tok string
		status                int
		want, never           string
	}{
		{"foreign Host with the token", "/api/jobs?reveal=env", "rebind.example:" + port, tok, http.StatusMisdirectedRequest, "misdirected_request", "hunter2"},
		{"foreign Host, the page", "/", "rebind.example", "", http.StatusMisdirectedRequest, "misdirected_request", "<html"},
		{"no token", "/api/jobs", uiLn.Addr().String(), "", http.StatusUnauthorized, `"error":"unauthenticated"`, "secretive"},
		{"no token, the stream", "/api/events", "localhost:" + port, "", http.StatusUnauthorized, "unauthenticated", ""},
		{"the token: env redacted", "/api/jobs", uiLn.Addr().String(), tok, http.StatusOK, `"DB_PASSWORD":"[redacted]"`, "hunter2"},
		{"localhost", "/api/jobs/secretive", "localhost:" + port, tok, http.StatusOK, `"env_redacted":true`, "hunter2"},
		{"a ui_hosts name, revealed", "/api/jobs/secretive?reveal=env", "chronos.internal", tok, http.StatusOK, `"DB_PASSWORD":"hunter2"`, "[redacted]"},
		{"the page on its own address", "/", uiLn.Addr().String(), "", http.StatusOK, "login-form", ""},
	} {
		code, body := uiGet(t, base, tc.path, tc.host, tc.tok)
		if code != tc.status || !strings.Contains(body, tc.want) || tc.never != "" && strings.Contains(body, tc.never) {
			t.Errorf("%s: %d %.300s, want %d with %s", tc.name, code, body, tc.status, tc.want)
		}
	}
	if j, err := c.Job(ctx, "secretive"); err != nil || j.Payload.Shell.Env["DB_PASSWORD"] != "hunter2" {
		t.Fatalf("the CLI's client reads %+v %v", j.Payload.Shell, err)
	}
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
}
