package localapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/runner"
)

// errorBody decodes the documented error body, failing on any other.
func errorBody(t *testing.T, b []byte) (code, description string) {
	t.Helper()
	var e struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error == "" || e.Description == "" {
		t.Fatalf("not the error body: %s", b)
	}
	return e.Error, e.Description
}

// hostRequest is a request to e with Host set to host.
func (e *env) hostRequest(t *testing.T, method, path, host, auth, body string) *http.Request {
	t.Helper()
	req := e.request(t, method, path, auth, body, localapi.HeaderUI, "1")
	req.Host = host
	return req
}

// TestForeignHostIsRefused: a request whose Host is not a name of the
// listener (a page that rebound its own name to the agent's address) is
// 421 misdirected_request on every route, with or without the token, and
// changes nothing; the listener's address, localhost, the loopback
// addresses (with or without port, any case) and the configured names are
// served.
func TestForeignHostIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{hosts: []string{"agent.lan", "[fd00::8]:8788"}})
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("keep", "echo kept"), nil)
	var run localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/keep/run", `{"force":false,"wait":true}`, &run)
	jobs, lines := snapshot(t, e)
	// A stream served by mistake would never end: the client gives up.
	bounded := &http.Client{Timeout: 10 * time.Second}
	routes := []struct{ method, path, body string }{
		{"GET", "/", ""},
		{"GET", "/assets/app.js", ""},
		{"GET", "/api/session", ""},
		{"POST", "/api/login", `{"token":"` + token + `"}`},
		{"GET", "/api/jobs", ""},
		{"GET", "/api/jobs/keep?reveal=env", ""},
		{"GET", "/api/runs", ""},
		{"GET", "/api/runs/" + run.RunID, ""},
		{"GET", "/api/events", ""},
		{"GET", "/api/status", ""},
		{"GET", "/api/nothing-here", ""},
		{"POST", "/api/jobs", shellSpec("new", "echo new")},
		{"PATCH", "/api/jobs/keep", `{"schedule":"every 1m"}`},
		{"POST", "/api/jobs/keep/pause", `{"reason":"x"}`},
		{"POST", "/api/jobs/keep/run", `{"force":true,"wait":false}`},
		{"DELETE", "/api/jobs/keep", ""},
	}
	for _, host := range []string{"rebind.example", "rebind.example:" + port(t, e.base), "agent.lan.rebind.example",
		"localhost.rebind.example", "127.0.0.1.nip.io", "10.1.2.3", "[fd00::9]:8788", "agent.lan:" + port(t, e.base) + ".x"} {
		for _, auth := range []string{"", token} {
			for _, r := range routes {
				code, b, h := sendWith(t, bounded, e.hostRequest(t, r.method, r.path, host, auth, r.body))
				if code != http.StatusMisdirectedRequest {
					t.Errorf("Host %s: %s %s (token %v): %d %s", host, r.method, r.path, auth != "", code, b)
					continue
				}
				if c, _ := errorBody(t, b); c != localapi.CodeMisdirected || h.Get("Set-Cookie") != "" {
					t.Errorf("Host %s: %s %s: %s, Set-Cookie %q", host, r.method, r.path, b, h.Get("Set-Cookie"))
				}
			}
		}
	}
	if j, l := snapshot(t, e); j != jobs || l != lines {
		t.Fatalf("a request with a foreign Host changed the home: ledger %d -> %d lines, jobs.json changed %v", lines, l, j != jobs)
	}

	for _, host := range []string{strings.TrimPrefix(e.base, "http://"), "127.0.0.1", "localhost", "LocalHost:" + port(t, e.base),
		"localhost.", "127.0.0.2:9", "[::1]:8788", "[::1]", "agent.lan", "Agent.LAN:443", "[fd00::8]", "[fd00::8]:1"} {
		code, b, _ := sendWith(t, bounded, e.hostRequest(t, "GET", "/api/jobs/keep", host, token, ""))
		if code != http.StatusOK {
			t.Errorf("Host %s: %d %s", host, code, b)
		}
	}
}

// port is the port of base.
func port(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// TestReadsNeedTheToken: every read (jobs carry their env, runs their
// output, the stream both) without credentials is 401 unauthenticated,
// with a wrong token 401 invalid_token, with a cookie of no session 401,
// each with the error body and a challenge; a session used from another
// site is 403; the token or a same-origin session reads. Nothing changes.
func TestReadsNeedTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("keep", "echo secret output"), nil)
	var run localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/keep/run", `{"force":false,"wait":true}`, &run)
	reads := []string{"/api/jobs", "/api/jobs/keep", "/api/jobs?reveal=env", "/api/runs", "/api/runs?job_id=keep",
		"/api/runs/" + run.RunID, "/api/runs/" + run.RunID + "/children", "/api/chains", "/api/chains/c-1",
		"/api/chain-breakers", "/api/status", "/api/events"}
	jobs, lines := snapshot(t, e)
	for _, auth := range []struct{ name, value, code string }{
		{"no token", "", "unauthenticated"},
		{"wrong token", "not-the-token", "invalid_token"},
		{"cookie of no session", "cookie:forged", "unauthenticated"},
	} {
		for _, p := range reads {
			code, b, h := e.call(t, "GET", p, auth.value, "")
			if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s with %s: %d %s", p, auth.name, code, b)
				continue
			}
			if c, _ := errorBody(t, b); c != auth.code {
				t.Errorf("GET %s with %s: %s, want %s", p, auth.name, c, auth.code)
			}
			if strings.Contains(string(b), "secret output") {
				t.Errorf("GET %s with %s leaked the output: %s", p, auth.name, b)
			}
		}
	}
	if j, l := snapshot(t, e); j != jobs || l != lines {
		t.Fatal("a refused read changed the home")
	}

	sess := login(t, e)
	for _, p := range reads[:len(reads)-1] {
		for _, hdr := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "same-site"}, {"Origin", "http://localhost:3000"}} {
			code, b, _ := e.call(t, "GET", p, sess, "", hdr...)
			if c, _ := errorBody(t, b); code != http.StatusForbidden || c != "forbidden" {
				t.Errorf("GET %s with the session and %v: %d %s", p, hdr, code, b)
			}
		}
		want := http.StatusOK
		if p == "/api/chains/c-1" {
			want = http.StatusNotFound
		}
		for _, auth := range []string{token, sess} {
			code, b, _ := e.call(t, "GET", p, auth, "", "Sec-Fetch-Site", "same-origin")
			if code != want {
				t.Errorf("GET %s with %.6s: %d %s, want %d", p, auth, code, b, want)
			}
		}
	}
	var detail localapi.RunDetail
	e.must(t, http.StatusOK, "GET", "/api/runs/"+run.RunID, "", &detail)
	if detail.OutputText != "secret output\n" {
		t.Fatalf("the token reads output %q", detail.OutputText)
	}
	var info localapi.SessionInfo
	if _, b, _ := e.call(t, "GET", "/api/session", "", ""); json.Unmarshal(b, &info) != nil || info.Authenticated || info.ReadsOpen {
		t.Fatalf("session without credentials: %s", b)
	}
}

// login logs in with the token and returns the session for call.
func login(t *testing.T, e *env) string {
	t.Helper()
	code, b, h := e.call(t, "POST", "/api/login", "", `{"token":"`+token+`"}`)
	if code != http.StatusOK {
		t.Fatalf("login: %d %s", code, b)
	}
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == localapi.SessionCookie {
			return "cookie:" + c.Value
		}
	}
	t.Fatalf("login set no session cookie: %q", h.Values("Set-Cookie"))
	return ""
}

// TestEnvRedactedUnlessRevealed: every answer carrying a job (list, show,
// add, edit, pause, the event stream) lists its env names with each value
// redacted, unless an authenticated caller asks with reveal=env; the
// stored job keeps the values; a value sent back as the placeholder, or an
// unknown reveal, is refused and changes nothing.
func TestEnvRedactedUnlessRevealed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.subscribe(t, "")
	env := map[string]string{"API_KEY": "s3cret-value", "REGION": "eu"}
	spec, _ := json.Marshal(localapi.JobSpec{ID: "deploy", Schedule: "@daily",
		Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: "deploy", Env: env}}})
	redactedEnv := map[string]string{"API_KEY": localapi.RedactedValue, "REGION": localapi.RedactedValue}

	// get decodes into a fresh JobInfo: a field left out stays zero.
	get := func(method, path, body string, status int) localapi.JobInfo {
		t.Helper()
		var in localapi.JobInfo
		e.must(t, status, method, path, body, &in)
		return in
	}
	check := func(what string, in localapi.JobInfo, reveal bool) {
		t.Helper()
		want, flag := redactedEnv, true
		if reveal {
			want, flag = env, false
		}
		if in.Payload.Shell == nil || !equalEnv(in.Payload.Shell.Env, want) || in.EnvRedacted != flag || in.Payload.Shell.Command != "deploy" {
			t.Errorf("%s: env %+v redacted %v, want %v %v", what, in.Payload.Shell, in.EnvRedacted, want, flag)
		}
	}
	check("POST /api/jobs", get("POST", "/api/jobs", string(spec), http.StatusCreated), false)
	check("GET /api/jobs/deploy", get("GET", "/api/jobs/deploy", "", http.StatusOK), false)
	var list localapi.JobList
	e.must(t, http.StatusOK, "GET", "/api/jobs", "", &list)
	if len(list.Jobs) != 1 {
		t.Fatalf("list %+v", list)
	}
	check("GET /api/jobs", list.Jobs[0], false)
	check("pause", get("POST", "/api/jobs/deploy/pause", `{"reason":"hold"}`, http.StatusOK), false)
	check("PATCH", get("PATCH", "/api/jobs/deploy", `{"name":"ship it"}`, http.StatusOK), false)
	for {
		ev := s.next(t, localapi.EventJob)
		if strings.Contains(ev.data, "s3cret-value") {
			t.Fatalf("the event stream carries the env value: %s", ev.data)
		}
		var in localapi.JobInfo
		if err := json.Unmarshal([]byte(ev.data), &in); err != nil {
			t.Fatal(err)
		}
		if in.Name == "ship it" {
			check("job event", in, false)
			break
		}
	}

	check("GET ?reveal=env", get("GET", "/api/jobs/deploy?reveal=env", "", http.StatusOK), true)
	var revealed localapi.JobList
	e.must(t, http.StatusOK, "GET", "/api/jobs?reveal=env", "", &revealed)
	check("GET /api/jobs?reveal=env", revealed.Jobs[0], true)
	check("resume ?reveal=env", get("POST", "/api/jobs/deploy/resume?reveal=env", "", http.StatusOK), true)
	got, err := localapi.NewClient(e.base, token, nil).Job(t.Context(), "deploy")
	if err != nil {
		t.Fatal(err)
	}
	check("Client.Job", got, true)
	if stored, err := e.rt.Job(t.Context(), "deploy"); err != nil || !equalEnv(stored.Payload.Shell.Env, env) {
		t.Fatalf("stored env %+v %v", stored.Payload.Shell, err)
	}

	jobs, lines := snapshot(t, e)
	for _, tc := range []struct {
		name, method, path, auth, body string
		status                         int
		code                           string
	}{
		{"reveal without the token", "GET", "/api/jobs/deploy?reveal=env", "", "", http.StatusUnauthorized, "unauthenticated"},
		{"unknown reveal", "GET", "/api/jobs/deploy?reveal=all", token, "", http.StatusBadRequest, "invalid_request"},
		{"unknown reveal on a change", "POST", "/api/jobs/deploy/pause?reveal=secrets", token, `{"reason":"x"}`, http.StatusBadRequest, "invalid_request"},
		{"placeholder sent back", "PATCH", "/api/jobs/deploy", token,
			`{"payload":{"kind":"shell","shell":{"command":"deploy","env":{"API_KEY":"[redacted]","REGION":"us"}}}}`, http.StatusUnprocessableEntity, "invalid_job"},
		{"placeholder in a new job", "POST", "/api/jobs", token,
			`{"id":"copy","schedule":"@daily","payload":{"kind":"shell","shell":{"command":"x","env":{"K":"[redacted]"}}}}`, http.StatusUnprocessableEntity, "invalid_job"},
	} {
		code, b, _ := e.bad(t, tc.method, tc.path, tc.auth, tc.body)
		if c, _ := errorBody(t, b); code != tc.status || c != tc.code || strings.Contains(string(b), "s3cret-value") {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, b, tc.status, tc.code)
		}
	}
	if j, l := snapshot(t, e); j != jobs || l != lines {
		t.Fatal("a refused call changed the home")
	}
}

func equalEnv(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
