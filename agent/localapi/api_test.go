package localapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/store"
)

// TestJobLifecycleWithTheToken: with the token, a job is created, shown,
// listed, run (its output read back), paused with a reason, resumed, edited
// and deleted, and the store says so after each step.
func TestJobLifecycleWithTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	var j localapi.JobInfo
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("hello", `echo "hello from $CHRONOS_JOB_ID"`), &j)
	if j.ID != "hello" || j.State != "scheduled" || j.Describe == "" || len(j.NextFires) != 3 {
		t.Fatalf("created %+v", j)
	}
	if _, err := e.rt.Job(t.Context(), "hello"); err != nil {
		t.Fatalf("not stored: %v", err)
	}
	var list localapi.JobList
	e.must(t, http.StatusOK, "GET", "/api/jobs", "", &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != "hello" {
		t.Fatalf("list %+v", list)
	}

	var run localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/hello/run", `{"force":false,"wait":true}`, &run)
	if run.State != ledger.StateSucceeded || run.Trigger != "manual" || run.Live {
		t.Fatalf("run %+v", run)
	}
	var detail localapi.RunDetail
	e.must(t, http.StatusOK, "GET", "/api/runs/"+run.RunID, "", &detail)
	if detail.OutputText != "hello from hello\n" || detail.OutputTruncated {
		t.Fatalf("output %q", detail.OutputText)
	}

	e.must(t, http.StatusOK, "POST", "/api/jobs/hello/pause", `{"reason":"maintenance"}`, &j)
	if stored, _ := e.rt.Job(t.Context(), "hello"); j.State != "paused" || stored.Enabled || stored.PausedReason != "maintenance" {
		t.Fatalf("paused %+v / stored %+v", j, stored)
	}
	e.must(t, http.StatusOK, "POST", "/api/jobs/hello/resume", "", &j)
	if stored, _ := e.rt.Job(t.Context(), "hello"); j.State != "scheduled" || !stored.Enabled {
		t.Fatalf("resumed %+v", j)
	}
	e.must(t, http.StatusOK, "PATCH", "/api/jobs/hello", `{"schedule":"every 1h","name":"hourly"}`, &j)
	if stored, _ := e.rt.Job(t.Context(), "hello"); stored.Schedule != "every 1h" || stored.Name != "hourly" {
		t.Fatalf("edited %+v", stored)
	}
	var removed localapi.Removed
	e.must(t, http.StatusOK, "DELETE", "/api/jobs/hello", "", &removed)
	if _, err := e.rt.Job(t.Context(), "hello"); !errors.Is(err, store.ErrNotFound) || !removed.Removed {
		t.Fatalf("still stored: %v", err)
	}
	code, b, _ := e.call(t, "GET", "/api/jobs/hello", token, "")
	if code != http.StatusNotFound || errorCode(t, b) != "not_found" {
		t.Fatalf("removed job: %d %s", code, b)
	}
}

// snapshot is what a refused call must leave unchanged: jobs.json and the
// ledger.
func snapshot(t *testing.T, e *env) (string, int) {
	t.Helper()
	jobs, err := os.ReadFile(filepath.Join(e.home, store.JobsFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	lines, err := e.rt.Ledger().Entries(context.Background(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return string(jobs), len(lines)
}

// TestChangesNeedTheToken: without the token (none, a wrong one, a cookie
// of no session) every change is 401 with the error body, and nothing in
// the store or the ledger changes.
func TestChangesNeedTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("keep", "echo kept"), nil)
	var run localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/keep/run", `{"force":false,"wait":true}`, &run)
	calls := []struct{ method, path, body string }{
		{"POST", "/api/jobs", shellSpec("new", "echo new")},
		{"PATCH", "/api/jobs/keep", `{"schedule":"every 1m"}`},
		{"DELETE", "/api/jobs/keep", ""},
		{"POST", "/api/jobs/keep/pause", `{"reason":"x"}`},
		{"POST", "/api/jobs/keep/resume", ""},
		{"POST", "/api/jobs/keep/run", `{"force":true,"wait":false}`},
		{"POST", "/api/runs/" + run.RunID + "/cancel", `{"reason":"x"}`},
	}
	jobs, lines := snapshot(t, e)
	for _, auth := range []struct{ name, value, code string }{
		{"no token", "", "unauthenticated"},
		{"wrong token", "not-the-token", "invalid_token"},
		{"cookie of no session", "cookie:forged", "unauthenticated"},
	} {
		for _, c := range calls {
			code, b, h := e.call(t, c.method, c.path, auth.value, c.body, localapi.HeaderUI, "1")
			if code != http.StatusUnauthorized || errorCode(t, b) != auth.code || h.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %s: %d %s", c.method, c.path, auth.name, code, b)
			}
		}
	}
	if j, l := snapshot(t, e); j != jobs || l != lines {
		t.Fatalf("a refused call changed the home: ledger %d -> %d lines, jobs.json changed %v", lines, l, j != jobs)
	}
}

// TestCookieLogin: a login with the token sets a SameSite=Strict, HttpOnly
// session cookie for /; a change made with it needs the X-Chronos-UI
// header and no foreign Origin; logout ends it.
func TestCookieLogin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	code, b, _ := e.call(t, "POST", "/api/login", "", `{"token":"wrong"}`)
	if code != http.StatusUnauthorized || errorCode(t, b) != "invalid_token" {
		t.Fatalf("wrong login: %d %s", code, b)
	}
	code, b, h := e.call(t, "POST", "/api/login", "", `{"token":"`+token+`"}`)
	if code != http.StatusOK {
		t.Fatalf("login: %d %s", code, b)
	}
	resp := http.Response{Header: h}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == localapi.SessionCookie {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || len(ck.Value) < 32 {
		t.Fatalf("cookie %+v (Set-Cookie %q)", ck, h.Values("Set-Cookie"))
	}
	sess := "cookie:" + ck.Value
	var info localapi.SessionInfo
	_, b, _ = e.call(t, "GET", "/api/session", sess, "")
	if err := json.Unmarshal(b, &info); err != nil || !info.Authenticated {
		t.Fatalf("session %s", b)
	}
	spec := shellSpec("via-cookie", "true")
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"no X-Chronos-UI header", nil},
		{"foreign origin", []string{localapi.HeaderUI, "1", "Origin", "https://evil.example"}},
		{"cross-site fetch", []string{localapi.HeaderUI, "1", "Sec-Fetch-Site", "cross-site"}},
	} {
		code, b, _ := e.call(t, "POST", "/api/jobs", sess, spec, tc.hdr...)
		if code != http.StatusForbidden || errorCode(t, b) != "forbidden" {
			t.Fatalf("%s: %d %s", tc.name, code, b)
		}
	}
	if jobs, _ := e.rt.Jobs(t.Context()); len(jobs) != 0 {
		t.Fatalf("a refused change stored %v", jobs)
	}
	code, b, _ = e.call(t, "POST", "/api/jobs", sess, spec, localapi.HeaderUI, "1", "Origin", e.base, "Sec-Fetch-Site", "same-origin")
	if code != http.StatusCreated {
		t.Fatalf("same-origin change with the cookie: %d %s", code, b)
	}
	e.call(t, "POST", "/api/logout", sess, "")
	code, _, _ = e.call(t, "DELETE", "/api/jobs/via-cookie", sess, "", localapi.HeaderUI, "1")
	if code != http.StatusUnauthorized {
		t.Fatalf("change after logout: %d", code)
	}
}

// TestBadInput: bad input gets the documented status and error code and
// changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("taken", "true"), nil)
	jobs, lines := snapshot(t, e)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"bad schedule", "POST", "/api/jobs", shellSpec("x", "true")[:0] + `{"schedule":"every banana","payload":{"kind":"shell","shell":{"command":"true"}}}`, 422, "invalid_job"},
		{"no command", "POST", "/api/jobs", `{"schedule":"@daily","payload":{"kind":"shell","shell":{}}}`, 422, "invalid_job"},
		{"unknown field", "POST", "/api/jobs", `{"schedule":"@daily","colour":"red","payload":{"kind":"shell","shell":{"command":"true"}}}`, 400, "unknown_field"},
		{"not json", "POST", "/api/jobs", `{"schedule":`, 400, "invalid_json"},
		{"id taken", "POST", "/api/jobs", shellSpec("taken", "false"), 409, "conflict"},
		{"bad zone", "PATCH", "/api/jobs/taken", `{"timezone":"Mars/Olympus"}`, 422, "invalid_job"},
		{"edit unknown job", "PATCH", "/api/jobs/nope", `{"name":"x"}`, 404, "not_found"},
		{"bad job id", "POST", "/api/jobs/bad%20id/pause", `{"reason":""}`, 400, "invalid_job_id"},
		{"pause unknown job", "POST", "/api/jobs/nope/pause", `{"reason":""}`, 404, "not_found"},
		{"run unknown job", "POST", "/api/jobs/nope/run", `{"force":false,"wait":false}`, 404, "not_found"},
		{"cancel unknown run", "POST", "/api/runs/r-nope/cancel", `{"reason":""}`, 404, "not_found"},
		{"unknown run", "GET", "/api/runs/r-nope", "", 404, "not_found"},
		{"bad status filter", "GET", "/api/runs?status=exploded", "", 400, "invalid_request"},
		{"bad limit", "GET", "/api/runs?limit=0", "", 400, "invalid_request"},
		{"bad since", "GET", "/api/runs?since=yesterday", "", 400, "invalid_request"},
		{"bad cursor", "GET", "/api/runs?cursor=%21%21", "", 400, "invalid_cursor"},
		{"bad event id", "GET", "/api/events?last_event_id=abc", "", 400, "invalid_request"},
		{"no route", "GET", "/api/nothing", "", 404, "not_found"},
	}
	for _, tc := range tests {
		code, b, _ := e.bad(t, tc.method, tc.path, token, tc.body)
		if code != tc.status || errorCode(t, b) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, b, tc.status, tc.code)
		}
	}
	if j, l := snapshot(t, e); j != jobs || l != lines {
		t.Fatal("bad input changed the home")
	}
}

// TestRunsListPagesAndFilters: runs come newest first, a cursor pages on
// without repeats, and the filters select.
func TestRunsListPagesAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("ok", "true"), nil)
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("bad", "exit 3"), nil)
	var want []string
	for _, id := range []string{"ok", "bad", "ok", "bad", "ok"} {
		var r localapi.RunInfo
		e.must(t, http.StatusOK, "POST", "/api/jobs/"+id+"/run", `{"force":true,"wait":true}`, &r)
		want = append([]string{r.RunID}, want...)
	}
	var got []string
	cursor := ""
	for page := 0; page < 5; page++ {
		var l localapi.RunList
		e.must(t, http.StatusOK, "GET", "/api/runs?limit=2&cursor="+cursor, "", &l)
		for _, r := range l.Runs {
			got = append(got, r.RunID)
		}
		if cursor = l.NextCursor; cursor == "" {
			break
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pages %v, want %v", got, want)
	}
	var failed localapi.RunList
	e.must(t, http.StatusOK, "GET", "/api/runs?status=failed&job_id=bad&since=1h", "", &failed)
	if len(failed.Runs) != 2 || failed.Runs[0].JobID != "bad" || failed.Runs[0].State != ledger.StateFailed {
		t.Fatalf("failed runs %+v", failed.Runs)
	}
}

// TestCancelThroughTheAPI: a live run is cancelled: SIGTERM reaches it, it
// is recorded cancelled, and a second cancel is a conflict.
func TestCancelThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.subscribe(t, "")
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("long", `trap 'echo stopping; exit 0' TERM; echo started; sleep 30 & wait`), nil)
	var started localapi.RunStarted
	e.must(t, http.StatusAccepted, "POST", "/api/jobs/long/run", `{"force":false,"wait":false}`, &started)
	for {
		var line ledger.Entry
		if err := json.Unmarshal([]byte(s.next(t, localapi.EventRun).data), &line); err != nil {
			t.Fatal(err)
		}
		if line.RunID == started.RunID && line.State == ledger.StateRunning {
			break
		}
	}
	waitOutput(t, e, "long", started.RunID, "started")
	var ans localapi.CancelAnswer
	e.must(t, http.StatusAccepted, "POST", "/api/runs/"+started.RunID+"/cancel", `{"reason":"operator asked"}`, &ans)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := e.rt.Wait(ctx, started.RunID, time.Now().Add(-time.Hour))
	if err != nil || r.State != ledger.StateCancelled || !strings.Contains(r.Reason, "operator asked") {
		t.Fatalf("run %+v %v", r, err)
	}
	var d localapi.RunDetail
	e.must(t, http.StatusOK, "GET", "/api/runs/"+started.RunID, "", &d)
	if !strings.Contains(d.OutputText, "stopping") || d.Live {
		t.Fatalf("detail %+v", d)
	}
	code, b, _ := e.call(t, "POST", "/api/runs/"+started.RunID+"/cancel", token, `{"reason":""}`)
	if code != http.StatusConflict || errorCode(t, b) != "conflict" {
		t.Fatalf("second cancel: %d %s", code, b)
	}
}

// waitOutput waits until the run's output has want.
func waitOutput(t *testing.T, e *env, jobID, runID, want string) {
	t.Helper()
	path := filepath.Join(e.home, "output", jobID, runID+".log")
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("output %q never had %q", b, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEnsureToken: the token file is made once, 0600, 64 hex digits, and
// read back after; a named file must exist.
func TestEnsureToken(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	tok, err := localapi.EnsureToken(home, "")
	if err != nil || len(tok) != 64 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Fatalf("token %q %v", tok, err)
	}
	st, err := os.Stat(filepath.Join(home, localapi.TokenFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file %v %v", st, err)
	}
	again, err := localapi.EnsureToken(home, "")
	if err != nil || again != tok {
		t.Fatalf("second start: %q %v", again, err)
	}
	if _, err := localapi.EnsureToken(home, filepath.Join(home, "missing")); err == nil {
		t.Fatal("a missing ui_token_file was accepted")
	}
	empty := filepath.Join(home, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := localapi.EnsureToken(home, empty); err == nil {
		t.Fatal("an empty ui_token_file was accepted")
	}
}

// TestClient: the client maps the API's answers to the runtime's errors.
func TestClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := localapi.NewClient(e.base, token, nil)
	ctx := t.Context()
	spec := agent.JobSpec{ID: "c1", Schedule: "@daily"}
	spec.Payload.Kind = "shell"
	if _, err := c.AddJob(ctx, spec); !errors.Is(err, agent.ErrInvalidJob) {
		t.Fatalf("no command: %v", err)
	}
	if _, err := c.Pause(ctx, "nope", ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	wrong := localapi.NewClient(e.base, "wrong", nil)
	var ae *localapi.APIError
	if err := wrong.Remove(ctx, "c1"); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Fatalf("wrong token: %v", err)
	}
}

// get fetches path without the description's check (its validator reads
// no HTML, CSS or JavaScript).
func (e *env) get(t *testing.T, path string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sendWith(t, http.DefaultClient, req)
}

// TestDashboardIsServed: the page and its assets come from the binary,
// under a content security policy that lets nothing load from elsewhere,
// and name no other origin; the page carries its data-test hooks.
func TestDashboardIsServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	code, page, h := e.get(t, "/")
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") ||
		!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("page: %d %v", code, h)
	}
	for _, hook := range []string{`data-test="jobs-table"`, `data-test="login-form"`, `data-test="add-form"`, `data-test="live-list"`, `data-test="runs-table"`} {
		if !strings.Contains(string(page), hook) {
			t.Errorf("the page has no %s", hook)
		}
	}
	for _, asset := range []struct{ path, ctype string }{{"/assets/app.js", "text/javascript"}, {"/assets/app.css", "text/css"}} {
		code, body, h := e.get(t, asset.path)
		if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), asset.ctype) || len(body) < 100 {
			t.Fatalf("%s: %d %s", asset.path, code, h.Get("Content-Type"))
		}
		if strings.Contains(string(body), "://") {
			t.Errorf("%s names another origin", asset.path)
		}
	}
	if strings.Contains(string(page), "://") {
		t.Error("the page names another origin")
	}
	code, b, _ := e.get(t, "/assets/other.js")
	if code != http.StatusNotFound || errorCode(t, b) != "not_found" {
		t.Fatalf("unknown asset: %d %s", code, b)
	}
}

// TestQuietRunHasEmptyOutput: a run that printed nothing has no output
// file; its detail shows empty output, not an error.
func TestQuietRunHasEmptyOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("quiet", "true"), nil)
	var run localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/quiet/run", `{"force":false,"wait":true}`, &run)
	var detail localapi.RunDetail
	e.must(t, http.StatusOK, "GET", "/api/runs/"+run.RunID, "", &detail)
	if run.State != ledger.StateSucceeded || detail.OutputText != "" || detail.OutputError != "" || detail.OutputTruncated {
		t.Fatalf("run %+v, detail %+v", run, detail)
	}
}
