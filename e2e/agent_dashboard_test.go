package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/browsertest"
)

// agentAPI sends one request to an agent's local API with its admin token
// and decodes a 2xx answer into out.
func agentAPI(t *testing.T, base, token, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, answer)
	}
	if out != nil {
		if err := json.Unmarshal(answer, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, answer)
		}
	}
}

// TestAgentDashboardInABrowser drives the agent's dashboard in headless
// Chromium against a real `chronos agent serve` (built-in timer, no NAS):
// it logs in with the home's ui-token, adds a job through the form, runs it
// and sees the run and its output arrive through the event stream without a
// reload, pauses and resumes it, sees a fanout run's children (with their
// items) and reducer nested under the parent run and a workflow's
// dependencies with their status dots and its skipped run with the reason,
// and in the chains view lists chains with their steps, opens a chain's
// story and resets an open breaker. Any request off loopback fails it.
func TestAgentDashboardInABrowser(t *testing.T) {
	t.Parallel()
	browser := browsertest.New(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	uiURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	writeFile(t, dir, "agent.yaml", fmt.Sprintf("home: %s\nlisten: 127.0.0.1:%d\nui_listen: %s\n",
		home, freePort(t), strings.TrimPrefix(uiURL, "http://")))
	agent := startProc(t, "agent", dir, nil, "agent", "serve", "--config", "agent.yaml")
	waitReady(t, agent, uiURL+"/api/session", 30*time.Second)
	raw, err := os.ReadFile(filepath.Join(home, "ui-token"))
	if err != nil {
		t.Fatalf("the agent did not create its ui-token: %v", err)
	}
	token := strings.TrimSpace(string(raw))

	// A fanout job over the output lines of another job's latest run,
	// added through the API (the form adds shell jobs).
	agentAPI(t, uiURL, token, http.MethodPost, "/api/jobs", map[string]any{
		"id": "regions", "schedule": "@hourly",
		"payload": map[string]any{"kind": "shell", "shell": map[string]any{"command": `printf 'north\nsouth\n'`}},
	}, nil)
	agentAPI(t, uiURL, token, http.MethodPost, "/api/jobs/regions/run", map[string]any{"force": false, "wait": true}, nil)
	agentAPI(t, uiURL, token, http.MethodPost, "/api/jobs", map[string]any{
		"id": "tiles", "name": "render map tiles", "schedule": "@daily", "job_kind": "fanout",
		"payload": map[string]any{"kind": "shell", "shell": map[string]any{"command": `echo "tile $FANOUT_ITEM"`}},
		"fanout": map[string]any{"inputs_from": "job://regions?output_as_lines&window=1h", "concurrency": 2,
			"reducer": map[string]any{"command": "echo merged", "run_on": "success"}},
	}, nil)

	browser.Open(uiURL + "/")
	browser.WaitVisible(`[data-test="login-form"]`)
	browser.WaitExact(`[data-test="auth-state"]`, "locked")
	if n := browsertest.Eval[int](browser, `document.querySelectorAll('[data-test="job-row"]').length`); n != 0 {
		t.Fatalf("the dashboard shows %d jobs before the login", n)
	}
	browser.Fill(`[data-test="login-token"]`, "not-the-token")
	browser.Click(`[data-test="login-submit"]`)
	browser.WaitText(`[data-test="login-error"]`, "not the agent's admin token")
	browser.Fill(`[data-test="login-token"]`, token)
	browser.Click(`[data-test="login-submit"]`)
	browser.WaitExact(`[data-test="auth-state"]`, "authenticated")
	browser.WaitExact(`[data-test="stream-state"]`, "live")
	browser.WaitExact(`[data-job-id="tiles"] [data-test="job-kind"]`, "fanout")

	// Add a job through the form.
	browser.Click(`[data-test="nav-add"]`)
	browser.Fill(`[data-test="add-id"]`, "hello")
	browser.Fill(`[data-test="add-name"]`, "greeting")
	browser.Fill(`[data-test="add-schedule"]`, "@daily")
	browser.Fill(`[data-test="add-command"]`, `echo "hello from the dashboard"`)
	browser.Click(`[data-test="add-submit"]`)
	browser.WaitVisible(`[data-test="job-page"][data-job-id="hello"]`)

	// Run it now: the run and its output arrive through the event stream,
	// with no reload of the page (the marker survives).
	browsertest.Eval[bool](browser, `(window.chronosNoReload = true)`)
	browser.Click(`[data-test="job-page-run"]`)
	browser.WaitVisible(`[data-test="run-row"][data-state="succeeded"]`)
	browser.Click(`[data-test="run-row"][data-state="succeeded"] [data-test="run-open"]`)
	browser.WaitText(`[data-test="run-output"]`, "hello from the dashboard")
	if !browsertest.Eval[bool](browser, `window.chronosNoReload === true`) {
		t.Fatal("the page was reloaded: the run did not arrive through the event stream")
	}
	browser.Click(`[data-test="nav-live"]`)
	browser.WaitVisible(`[data-test="live-item"][data-state="succeeded"]`)

	// Pause with a reason, then resume, from the jobs list.
	browser.Click(`[data-test="nav-jobs"]`)
	browser.Fill(`[data-test="pause-reason"]`, "maintenance window")
	browser.Click(`[data-job-id="hello"] [data-test="job-pause"]`)
	browser.WaitExact(`[data-job-id="hello"] [data-test="job-state"]`, "paused")
	browser.WaitText(`[data-job-id="hello"]`, "maintenance window")
	var job struct {
		State        string `json:"state"`
		PausedReason string `json:"paused_reason"`
	}
	agentAPI(t, uiURL, token, http.MethodGet, "/api/jobs/hello", nil, &job)
	if job.State != "paused" || job.PausedReason != "maintenance window" {
		t.Fatalf("after pause the agent has %+v", job)
	}
	browser.Click(`[data-job-id="hello"] [data-test="job-resume"]`)
	browser.WaitExact(`[data-job-id="hello"] [data-test="job-state"]`, "scheduled")
	agentAPI(t, uiURL, token, http.MethodGet, "/api/jobs/hello", nil, &job)
	if job.State != "scheduled" {
		t.Fatalf("after resume the agent has %+v", job)
	}

	// A fanout run: its children, each with its item, and its reducer are
	// nested under it.
	browser.Click(`[data-job-id="tiles"] [data-test="job-link"]`)
	browser.WaitVisible(`[data-test="job-page"][data-job-id="tiles"]`)
	browser.Click(`[data-test="job-page-run"]`)
	browser.WaitVisible(`[data-test="run-row"][data-role="parent"][data-state="succeeded"]`)
	browser.WaitVisible(`[data-test="run-child"][data-item="north"][data-state="succeeded"]`)
	browser.WaitVisible(`[data-test="run-child"][data-item="south"][data-state="succeeded"]`)
	browser.WaitVisible(`[data-test="run-child"][data-role="reducer"][data-state="succeeded"]`)
	browser.WaitText(`[data-test="run-child"][data-item="north"] [data-test="run-item"]`, "north")
	order := browsertest.Eval[[]string](browser, `[...document.querySelectorAll('#runs-table tbody tr')].map((r) =>
		(r.dataset.role || "") + ":" + (r.dataset.item || ""))`)
	if want := []string{"parent:", "child:north", "child:south", "reducer:"}; strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("runs table rows %v, want %v", order, want)
	}
	browser.Click(`[data-test="run-child"][data-item="south"] [data-test="run-open"]`)
	browser.WaitText(`[data-test="run-output"]`, "tile south")

	checkLayout(t, browser, "agent-dashboard")

	// A workflow shows its dependencies with a status dot each; its run,
	// declined for a dependency without a run, is shown skipped with the
	// reason naming it.
	agentAPI(t, uiURL, token, http.MethodPost, "/api/jobs", map[string]any{
		"id": "never", "schedule": "@yearly", "paused": true, "paused_reason": "kept idle",
		"payload": map[string]any{"kind": "shell", "shell": map[string]any{"command": "true"}},
	}, nil)
	agentAPI(t, uiURL, token, http.MethodPost, "/api/jobs", map[string]any{
		"id": "publish", "schedule": "@daily", "job_kind": "workflow",
		"payload":  map[string]any{"kind": "shell", "shell": map[string]any{"command": "echo published"}},
		"workflow": map[string]any{"depends_on": []string{"hello", "never"}, "window": "1h"},
	}, nil)
	browser.Click(`[data-test="nav-jobs"]`)
	browser.Click(`[data-job-id="publish"] [data-test="job-link"]`)
	browser.WaitVisible(`[data-test="job-deps"] [data-test="dep"][data-dep-id="hello"][data-state="succeeded"] [data-test="dep-dot"]`)
	browser.WaitVisible(`[data-test="job-deps"] [data-test="dep"][data-dep-id="never"][data-state="missing"] [data-test="dep-dot"]`)
	browser.Click(`[data-test="job-page-run"]`)
	browser.WaitVisible(`[data-test="run-row"][data-state="skipped"]`)
	browser.WaitText(`[data-test="run-row"][data-state="skipped"] [data-test="run-reason"]`, "never")

	// Chains: one open; three closed failed, which open their class's
	// breaker. The chains view lists them with their steps, tells a
	// chain's story, and resets the breaker with its button.
	browser.Click(`[data-test="nav-chains"]`)
	browser.WaitVisible(`[data-test="no-chains"]`)
	mustChronos(t, dir, nil, "--home", home, "chain", "start", "--class", "probe", "--id", "probe-1", "--stage", "action", "--in", "1h", "--", "true")
	for _, id := range []string{"disk-1", "disk-2", "disk-3"} {
		mustChronos(t, dir, nil, "--home", home, "chain", "start", "--class", "disk", "--id", id, "--stage", "action", "--in", "1h", "--", "true")
		mustChronos(t, dir, nil, "--home", home, "chain", "close", "--chain", id, "--failed", "--reason", "still full")
	}
	browser.Click(`[data-test="nav-jobs"]`)
	browser.Click(`[data-test="nav-chains"]`)
	browser.WaitExact(`[data-test="chain-row"][data-chain-id="probe-1"] [data-test="chain-state"]`, "armed")
	browser.WaitVisible(`[data-chain-id="probe-1"] [data-test="chain-step"][data-status="pending"]`)
	browser.WaitText(`[data-test="chain-row"][data-chain-id="disk-2"] [data-test="chain-reason"]`, "still full")
	rows := browsertest.Eval[[]string](browser, `[...document.querySelectorAll('[data-test="chain-row"]')].map((r) => r.dataset.chainId)`)
	if want := "probe-1 disk-3 disk-2 disk-1"; strings.Join(rows, " ") != want {
		t.Fatalf("chains listed %v, want %s", rows, want)
	}
	browser.Click(`[data-test="chain-row"][data-chain-id="probe-1"] [data-test="chain-open"]`)
	browser.WaitText(`[data-test="chain-story"]`, "Chain probe-1 (class probe): armed")
	browser.WaitVisible(`[data-test="chain-transition"]`)
	browser.WaitVisible(`[data-test="story-step"][data-status="pending"]`)
	browser.WaitVisible(`[data-test="breaker-row"][data-class="disk"][data-state="open"]`)
	if resume := browser.Text(`[data-class="disk"] [data-test="breaker-resume"]`); resume == "-" || resume == "" {
		t.Fatalf("the open breaker shows no resume time (%q)", resume)
	}
	checkNarrow(t, browser, filepath.Join(t.TempDir(), "agent-chains-390.png"), "the chains view")
	browser.Click(`[data-class="disk"] [data-test="breaker-reset"]`)
	browser.WaitVisible(`[data-test="breaker-row"][data-class="disk"][data-state="closed"]`)
	var breakers struct {
		Breakers []struct {
			Class string `json:"class"`
			State string `json:"state"`
		} `json:"breakers"`
	}
	agentAPI(t, uiURL, token, http.MethodGet, "/api/chain-breakers", nil, &breakers)
	reset := false
	for _, b := range breakers.Breakers {
		reset = reset || b.Class == "disk" && b.State == "closed"
	}
	if !reset {
		t.Fatalf("after the reset the agent has %+v", breakers.Breakers)
	}
}
