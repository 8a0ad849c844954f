package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	browser.WaitText(`[data-test="run-output"] [data-test="run-stdout"]`, "hello from the dashboard")
	checkOutputBeside(t, browser, `[data-test="run-row"][data-state="succeeded"]`)
	if !browsertest.Eval[bool](browser, `window.chronosNoReload === true`) {
		t.Fatal("the page was reloaded: the run did not arrive through the event stream")
	}
	browser.Click(`[data-test="nav-live"]`)
	browser.WaitVisible(`[data-test="live-item"][data-state="succeeded"]`)

	// Pause with a reason, then resume, from the jobs list.
	browser.Click(`[data-test="nav-jobs"]`)
	if browsertest.Eval[bool](browser, `!!document.querySelector('#view-jobs [data-test="pause-reason"], #view-jobs .pause-line')`) {
		t.Fatal("the jobs list shows a reason for pausing before any Pause was pressed")
	}
	browser.Click(`[data-job-id="hello"] [data-test="job-pause"]`)
	browser.Fill(`[data-job-id="hello"] [data-test="row-pause-reason"]`, "maintenance window")
	browser.Click(`[data-job-id="hello"] [data-test="row-pause-confirm"]`)
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
	// The children are collapsed under their parent until it is expanded.
	if n := browsertest.Eval[int](browser, `document.querySelectorAll('[data-test="run-child"]').length`); n != 0 {
		t.Fatalf("%d fanout children shown before their parent was expanded", n)
	}
	browser.Click(`[data-test="run-row"][data-role="parent"] [data-test="run-expand"]`)
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
	checkOutputBeside(t, browser, `[data-test="run-child"][data-item="south"]`)
	checkLayout(t, browser, "agent-dashboard")
	browser.Click(`[data-test="run-row"][data-role="parent"] [data-test="run-expand"]`)
	browser.WaitGone(`[data-test="run-child"]`)

	checkRunsViews(t, browser, uiURL, token, home)
	checkNarrow(t, browser, filepath.Join(t.TempDir(), "agent-runs-390.png"), "a job's runs")

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
	// Open chains first, then the closed ones newest first, once the view
	// has the last close (it follows the event stream).
	eventually(t, 10*time.Second, "the chains in order", func() (bool, string) {
		rows := browsertest.Eval[[]string](browser, `[...document.querySelectorAll('[data-test="chain-row"]')].map((r) => r.dataset.chainId)`)
		return strings.Join(rows, " ") == "probe-1 disk-3 disk-2 disk-1", fmt.Sprintf("%v, want probe-1 disk-3 disk-2 disk-1", rows)
	})
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

// checkOutputBeside checks that the output of the run of row (a selector)
// opened right under it: the next row of the table, with no gap.
func checkOutputBeside(t *testing.T, browser *browsertest.Browser, row string) {
	t.Helper()
	browser.WaitVisible(`[data-test="run-output-row"]`)
	gap := browsertest.Eval[float64](browser, `(() => {
		const run = document.querySelector(`+strconv.Quote(row)+`), out = document.querySelector('[data-test="run-output-row"]');
		if (!run || !out || run.nextElementSibling !== out || out.dataset.runId !== run.dataset.runId) return -1;
		return out.getBoundingClientRect().top - run.getBoundingClientRect().bottom;
	})()`)
	if gap < 0 || gap > 4 {
		t.Fatalf("the output of %s opened %v px away from its run (-1: not the next row)", row, gap)
	}
}

// selectRuns sets a select of the job page's runs bar and fires its change.
func selectRuns(browser *browsertest.Browser, test, value string) {
	browsertest.Eval[bool](browser, `(() => { const s = document.querySelector('[data-test="`+test+`"]');
		s.value = "`+value+`"; s.dispatchEvent(new Event("change")); return true; })()`)
}

// checkRunsViews drives a job's page through the runs' views: times in the
// job's zone, standard output and standard error apart (and an output file
// recorded as one stream shown whole), the chart of recent runs, the state
// filter and the paging.
func checkRunsViews(t *testing.T, browser *browsertest.Browser, uiURL, token, home string) {
	t.Helper()
	agentAPI(t, uiURL, token, http.MethodPost, "/api/jobs", map[string]any{
		"id": "report", "schedule": "0 9 * * *", "timezone": "America/New_York",
		"payload": map[string]any{"kind": "shell", "shell": map[string]any{
			"command": `echo "rows: $(( $(date +%s) % 7 ))"; if [ -e "$CHRONOS_HOME/fail-once" ]; then rm "$CHRONOS_HOME/fail-once"; echo "disk full" >&2; exit 3; fi; echo "report written" >&2`,
			"env":     map[string]string{"CHRONOS_HOME": home}}},
	}, nil)
	for i := range 12 {
		if i == 5 {
			writeFile(t, home, "fail-once", "")
		}
		agentAPI(t, uiURL, token, http.MethodPost, "/api/jobs/report/run", map[string]any{"force": true, "wait": true}, nil)
	}
	browser.Click(`[data-test="nav-jobs"]`)
	browser.Click(`[data-job-id="report"] [data-test="job-link"]`)
	browser.WaitVisible(`[data-test="job-page"][data-job-id="report"]`)
	browser.WaitVisible(`[data-test="run-row"][data-state="failed"]`)
	// Every time carries its zone: the job's.
	browser.WaitText(`[data-test="run-row"] [data-test="run-slot"]`, "America/New_York")
	browser.WaitText(`#job-details`, "America/New_York")

	// The chart: a bar per run, the failed one in its own colour.
	browser.WaitVisible(`[data-test="runs-chart"] [data-test="chart-bar"][data-state="failed"]`)
	if n := browsertest.Eval[int](browser, `document.querySelectorAll('[data-test="chart-bar"]').length`); n != 12 {
		t.Errorf("the chart has %d bars, want the job's 12 runs", n)
	}
	browser.WaitText(`[data-test="runs-chart-caption"]`, "11 succeeded")

	// Standard output and standard error apart.
	browser.Click(`[data-test="run-row"][data-state="failed"] [data-test="run-open"]`)
	browser.WaitText(`[data-test="run-output"] [data-test="run-stderr"]`, "disk full")
	if out := browser.Text(`[data-test="run-output"] [data-test="run-stdout"]`); !strings.Contains(out, "rows: ") || strings.Contains(out, "disk full") {
		t.Errorf("stdout of the failed run: %q", out)
	}
	checkOutputBeside(t, browser, `[data-test="run-row"][data-state="failed"]`)
	if os.Getenv(EnvUpdateScreenshots) == "1" {
		browser.Screenshot(filepath.Join(repoRoot, "docs", "agent-dashboard-runs.png"), 1280, 900)
	}
	browser.Click(`[data-test="run-output-close"]`)
	browser.WaitGone(`[data-test="run-output-row"]`)

	// A run recorded before the streams were kept apart reads whole.
	var runs struct {
		Runs []struct {
			RunID  string `json:"run_id"`
			Output string `json:"output"`
		} `json:"runs"`
	}
	agentAPI(t, uiURL, token, http.MethodGet, "/api/runs?job_id=report&status=succeeded&limit=1", nil, &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].Output == "" {
		t.Fatalf("no succeeded run of report with output: %+v", runs.Runs)
	}
	old := runs.Runs[0]
	if err := os.Remove(filepath.Join(home, strings.TrimSuffix(old.Output, ".log")+".streams.json")); err != nil {
		t.Fatalf("the run's streams file: %v", err)
	}
	browser.Click(`[data-test="run-row"][data-run-id="` + old.RunID + `"] [data-test="run-open"]`)
	browser.WaitText(`[data-test="run-output"] [data-test="run-combined"]`, "report written")

	// The state filter and the paging.
	selectRuns(browser, "runs-filter", "failed")
	browser.WaitExact(`[data-test="runs-page"]`, "page 1, failed only")
	if n := browsertest.Eval[int](browser, `document.querySelectorAll('[data-test="run-row"]').length`); n != 1 {
		t.Errorf("%d runs shown under the failed filter, want 1", n)
	}
	selectRuns(browser, "runs-filter", "cancelled")
	browser.WaitVisible(`[data-test="no-runs"]`)
	selectRuns(browser, "runs-filter", "")
	selectRuns(browser, "runs-page-size", "10")
	browser.WaitExact(`[data-test="runs-page"]`, "page 1")
	pageIDs := func() []string {
		return browsertest.Eval[[]string](browser, `[...document.querySelectorAll('[data-test="run-row"]')].map((r) => r.dataset.runId)`)
	}
	eventually(t, 10*time.Second, "10 runs on the first page", func() (bool, string) {
		ids := pageIDs()
		return len(ids) == 10, fmt.Sprint(len(ids))
	})
	first := pageIDs()
	browser.Click(`[data-test="runs-older"]`)
	browser.WaitExact(`[data-test="runs-page"]`, "page 2")
	eventually(t, 10*time.Second, "the 2 older runs on page 2", func() (bool, string) {
		ids := pageIDs()
		return len(ids) == 2 && !slices.Contains(first, ids[0]) && !slices.Contains(first, ids[1]), fmt.Sprint(ids)
	})
	if !browsertest.Eval[bool](browser, `document.querySelector('[data-test="runs-older"]').disabled`) {
		t.Error("Older is enabled on the last page")
	}
	browser.Click(`[data-test="runs-newer"]`)
	browser.WaitExact(`[data-test="runs-page"]`, "page 1")
	// The reason for pausing is on the job page, beside its Pause.
	browser.WaitVisible(`#view-job [data-test="pause-reason"]`)
}
