package nas_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

func TestCallbackPolicyAddrs(t *testing.T) {
	t.Parallel()
	allow, err := nas.ParseAllowlist([]string{"10.1.0.0/16", "192.168.7.7", "agents.internal"})
	if err != nil {
		t.Fatal(err)
	}
	strict := nas.CallbackPolicy{Allow: allow}
	dev := nas.CallbackPolicy{AllowPrivate: true}
	tests := []struct {
		addr        string
		strict, dev bool
	}{
		{"93.184.216.34", true, true},
		{"2606:4700::1111", true, true},
		{"127.0.0.1", false, true},
		{"::1", false, true},
		{"10.0.0.1", false, true},
		{"10.1.2.3", true, true}, // allowlisted prefix
		{"192.168.7.7", true, true},
		{"192.168.7.8", false, true},
		{"172.16.0.1", false, true},
		{"169.254.1.1", false, true},
		{"169.254.169.254", false, false}, // metadata: never without an explicit entry
		{"fd00:ec2::254", false, false},
		{"::ffff:169.254.169.254", false, false},
		{"::ffff:127.0.0.1", false, true},
		{"0.0.0.0", false, false},
		{"::", false, false},
		{"224.0.0.1", false, false},
		{"ff02::1", false, false},
		{"100.64.0.1", false, true},
		{"fc00::1", false, true},
	}
	for _, tt := range tests {
		ip := netip.MustParseAddr(tt.addr)
		if got := strict.AllowedAddr(ip); got != tt.strict {
			t.Errorf("strict %s: %v, want %v", tt.addr, got, tt.strict)
		}
		if got := dev.AllowedAddr(ip); got != tt.dev {
			t.Errorf("dev %s: %v, want %v", tt.addr, got, tt.dev)
		}
	}
	if !strict.AllowedHost("Agents.Internal.") || strict.AllowedHost("other.internal") {
		t.Error("host allowlist")
	}
	if _, err := nas.ParseAllowlist([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad CIDR parsed")
	}
}

func TestCheckCallbackURL(t *testing.T) {
	t.Parallel()
	p := nas.CallbackPolicy{}
	tests := []struct {
		url    string
		status int // 0: accepted
	}{
		{"https://agent.example.com", 0},
		{"https://agent.example.com/base/", 0},
		{"http://agent.example.com:8080/api/cron/fire", 0},
		{"", 400},
		{"agent.example.com", 400},
		{"ftp://agent.example.com", 400},
		{"https://", 400},
		{"https://user:pw@agent.example.com", 400},
		{"https://agent.example.com/#frag", 400},
		{"https://agent.example.com/?q=1", 400},
		{"https://agent.example.com/" + strings.Repeat("a", 3000), 400},
		{"http://127.0.0.1:8080", 422},
		{"http://[::1]:8080", 422},
		{"http://localhost:8080", 422},
		{"http://169.254.169.254/latest", 422},
		{"http://10.0.0.5", 422},
	}
	for _, tt := range tests {
		_, e := p.CheckCallbackURL(tt.url)
		switch {
		case tt.status == 0 && e != nil:
			t.Errorf("%q refused: %v", tt.url, e)
		case tt.status != 0 && (e == nil || e.HTTPStatus() != tt.status || e.Code != contract.CodeInvalidCallbackURL):
			t.Errorf("%q: %v, want %d invalid_callback_url", tt.url, e, tt.status)
		}
	}
}

func TestFireURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://a.example":                "https://a.example/api/cron/fire",
		"https://a.example/":               "https://a.example/api/cron/fire",
		"https://a.example/base":           "https://a.example/base/api/cron/fire",
		"https://a.example/api/cron/fire":  "https://a.example/api/cron/fire",
		"https://a.example/api/cron/fire/": "https://a.example/api/cron/fire",
	} {
		if got := nas.FireURL(in); got != want {
			t.Errorf("FireURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAgentCallerRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	strict := nas.NewAgentCaller(nas.CallbackPolicy{}, time.Second)
	res := strict.Fire(context.Background(), srv.URL+"/api/cron/fire", "tok", []byte(`{}`))
	if res.Outcome != agentcall.OutcomeRejected || hits.Load() != 0 {
		t.Fatalf("loopback callback: %+v, %d requests reached it", res, hits.Load())
	}
	// A name that resolves to loopback is refused after resolution too.
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	res = strict.Fire(context.Background(), "http://localhost"+port+"/api/cron/fire", "tok", []byte(`{}`))
	if res.Outcome != agentcall.OutcomeRejected || hits.Load() != 0 {
		t.Fatalf("localhost callback: %+v", res)
	}
	t.Run("allowlisted", func(t *testing.T) {
		allow, _ := nas.ParseAllowlist([]string{"127.0.0.1"})
		c := nas.NewAgentCaller(nas.CallbackPolicy{Allow: allow}, time.Second)
		if res := c.Fire(context.Background(), srv.URL+"/api/cron/fire", "tok", []byte(`{}`)); res.Outcome != agentcall.OutcomeDelivered {
			t.Fatalf("allowlisted: %+v", res)
		}
	})
}

func TestAgentCallerAnswers(t *testing.T) {
	t.Parallel()
	type want struct {
		outcome, agentStatus string
		cold                 bool
		retryAfter           time.Duration
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    want
	}{
		{"202 accepted", reply(202, `{"status":"accepted","job_id":"j","run_id":"r"}`, ""), want{outcome: agentcall.OutcomeDelivered, agentStatus: "accepted"}},
		{"200 duplicate", reply(200, `{"status":"duplicate"}`, ""), want{outcome: agentcall.OutcomeDelivered, agentStatus: "duplicate"}},
		{"204 empty", reply(204, ``, ""), want{outcome: agentcall.OutcomeDelivered}},
		{"503 cold", reply(503, ``, "4"), want{outcome: agentcall.OutcomeRetry, cold: true, retryAfter: 4 * time.Second}},
		{"429", reply(429, ``, "2"), want{outcome: agentcall.OutcomeRetry, retryAfter: 2 * time.Second}},
		{"500", reply(500, ``, ""), want{outcome: agentcall.OutcomeRetry}},
		{"401", reply(401, `{"error":"invalid_token"}`, ""), want{outcome: agentcall.OutcomeRefused}},
		{"425 with Retry-After", reply(425, `{"error":"too_early"}`, "12"), want{outcome: agentcall.OutcomeRetry, retryAfter: 12 * time.Second}},
		{"400", reply(400, ``, ""), want{outcome: agentcall.OutcomeRejected}},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}, want{outcome: agentcall.OutcomeRejected}},
		{"huge answer is read capped", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(202)
			_, _ = io.WriteString(w, `{"status":"accepted","pad":"`+strings.Repeat("x", 1<<20)+`"}`)
		}, want{outcome: agentcall.OutcomeDelivered}},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			// Answer only after the caller's deadline has passed: the caller
			// must have given up by then. The bound keeps the test server's
			// Close from waiting on a hang-up it may not notice.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
		}, want{outcome: agentcall.OutcomeRetry}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var redirected atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/elsewhere" {
					redirected.Store(true)
				}
				if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != "application/json" {
					w.WriteHeader(418)
					return
				}
				tt.handler(w, r)
			}))
			t.Cleanup(func() {
				srv.CloseClientConnections()
				srv.Close()
			})
			c := nas.NewAgentCaller(nas.CallbackPolicy{AllowPrivate: true}, 300*time.Millisecond)
			res := c.Fire(context.Background(), srv.URL+"/api/cron/fire", "tok", []byte(`{"job_id":"j"}`))
			if res.Outcome != tt.want.outcome || res.AgentStatus != tt.want.agentStatus || res.ColdStart != tt.want.cold || res.RetryAfter != tt.want.retryAfter {
				t.Fatalf("got %+v, want %+v", res, tt.want)
			}
			if redirected.Load() {
				t.Fatal("a redirect was followed")
			}
		})
	}
	// Connection refused is a cold start.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := nas.NewAgentCaller(nas.CallbackPolicy{AllowPrivate: true}, time.Second)
	if res := c.Fire(context.Background(), url+"/api/cron/fire", "tok", nil); res.Outcome != agentcall.OutcomeRetry || !res.ColdStart {
		t.Fatalf("refused: %+v", res)
	}
}

// TestAgentCallerRequest pins what a call to an agent sends (a POST of the
// exact body, JSON content type, the bearer token, NAS's user agent, no
// compression asked for) and reads back (the answer's status and run_id).
func TestAgentCallerRequest(t *testing.T) {
	t.Parallel()
	body := []byte(`{"job_id":"j","fire_at":"2026-06-18T09:00:00Z","schedule_id":"s","attempt":1}`)
	type seen struct {
		method, path, contentType, auth, userAgent, acceptEncoding string
		contentLength                                              int64
		body                                                       []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), r.Header.Get("User-Agent"),
			r.Header.Get("Accept-Encoding"), r.ContentLength, b}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"status":"accepted","job_id":"j","run_id":"r-7"}`+"\n")
	}))
	t.Cleanup(srv.Close)
	c := nas.NewAgentCaller(nas.CallbackPolicy{AllowPrivate: true}, 5*time.Second)
	t.Cleanup(c.CloseIdle)
	for range 2 { // the second call reuses the connection
		res := c.Fire(context.Background(), srv.URL+"/api/cron/fire", "tok.en", body)
		if res.Outcome != agentcall.OutcomeDelivered || res.HTTPStatus != 202 || res.AgentStatus != "accepted" || res.RunID != "r-7" {
			t.Fatalf("result %+v", res)
		}
		want := seen{http.MethodPost, "/api/cron/fire", "application/json", "Bearer tok.en", "chronos-nas", "", int64(len(body)), body}
		if s := <-got; s.method != want.method || s.path != want.path || s.contentType != want.contentType || s.auth != want.auth ||
			s.userAgent != want.userAgent || s.acceptEncoding != want.acceptEncoding || s.contentLength != want.contentLength || !bytes.Equal(s.body, want.body) {
			t.Fatalf("the agent saw %+v\nwant %+v", s, want)
		}
	}
}

// TestAgentCallerDeadlines: a call ends at the caller's timeout or at its
// context's deadline, whichever comes first.
func TestAgentCallerDeadlines(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.CloseClientConnections()
		srv.Close()
	})
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		ctx     time.Duration // 0: no deadline
	}{
		{"caller timeout, no context deadline", 200 * time.Millisecond, 0},
		{"caller timeout before the context's deadline", 200 * time.Millisecond, time.Hour},
		{"context deadline before the caller timeout", time.Hour, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			c := nas.NewAgentCaller(nas.CallbackPolicy{AllowPrivate: true}, tc.timeout)
			done := make(chan agentcall.FireResult, 1)
			go func() { done <- c.Fire(ctx, srv.URL+"/api/cron/fire", "tok", []byte(`{}`)) }()
			select {
			case res := <-done:
				if res.Outcome != agentcall.OutcomeRetry || res.Reason != "agent timed out" {
					t.Fatalf("result %+v, want a retry: agent timed out", res)
				}
			case <-time.After(time.Minute):
				t.Fatal("the call outlived both its timeout and its context")
			}
		})
	}
}

// TestClassifyAnswer is the table of docs/operations.md, row by row: what
// each agent answer means for the relay.
func TestClassifyAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status     int
		body       string
		retryAfter string
		outcome    string
		cold       bool
		wait       time.Duration
		reason     string // a substring of the reason ("" for delivered)
		agentError string
	}{
		{status: 200, body: `{"status":"duplicate"}`, outcome: agentcall.OutcomeDelivered},
		{status: 202, body: `{"status":"accepted","run_id":"r"}`, outcome: agentcall.OutcomeDelivered},
		{status: 204, outcome: agentcall.OutcomeDelivered},
		{status: 401, body: `{"error":"invalid_token"}`, outcome: agentcall.OutcomeRefused, reason: "agent answered 401 invalid_token", agentError: "invalid_token"},
		{status: 403, body: `{"error":"invalid_audience"}`, outcome: agentcall.OutcomeRefused, reason: "agent answered 403 invalid_audience", agentError: "invalid_audience"},
		{status: 401, retryAfter: "5", outcome: agentcall.OutcomeRefused, wait: 5 * time.Second, reason: "agent answered 401"},
		{status: 500, body: `oops`, outcome: agentcall.OutcomeRetry, reason: "agent answered 500"},
		{status: 502, outcome: agentcall.OutcomeRetry, reason: "agent answered 502"},
		{status: 503, retryAfter: "3", outcome: agentcall.OutcomeRetry, cold: true, wait: 3 * time.Second, reason: "agent answered 503"},
		{status: 504, outcome: agentcall.OutcomeRetry, reason: "agent answered 504"},
		{status: 408, outcome: agentcall.OutcomeRetry, reason: "agent answered 408"},
		{status: 425, body: `{"error":"too_early"}`, retryAfter: "40", outcome: agentcall.OutcomeRetry, wait: 40 * time.Second, reason: "agent answered 425 too_early", agentError: "too_early"},
		{status: 429, retryAfter: "Mon, 01 Jan 2001 00:00:00 GMT", outcome: agentcall.OutcomeRetry, reason: "agent answered 429"},
		{status: 400, body: `{"error":"invalid_request"}`, outcome: agentcall.OutcomeRejected, reason: "agent answered 400 invalid_request", agentError: "invalid_request"},
		{status: 404, outcome: agentcall.OutcomeRejected, reason: "agent answered 404"},
		{status: 410, outcome: agentcall.OutcomeRejected, reason: "agent answered 410"},
		{status: 422, outcome: agentcall.OutcomeRejected, reason: "agent answered 422"},
		{status: 418, outcome: agentcall.OutcomeRejected, reason: "agent answered 418"},
		{status: 301, outcome: agentcall.OutcomeRejected, reason: "redirect"},
		{status: 307, outcome: agentcall.OutcomeRejected, reason: "redirect"},
		// An error code that is not a code stays out of the reason.
		{status: 400, body: `{"error":"bad\u001b[31m"}`, outcome: agentcall.OutcomeRejected, reason: "agent answered 400"},
	}
	for _, tt := range tests {
		r := nas.ClassifyAnswer(tt.status, tt.retryAfter, []byte(tt.body))
		if r.Outcome != tt.outcome || r.ColdStart != tt.cold || r.RetryAfter != tt.wait || r.HTTPStatus != tt.status || r.AgentError != tt.agentError ||
			!strings.Contains(r.Reason, tt.reason) || strings.ContainsRune(r.Reason, 0x1b) {
			t.Errorf("%d %s: %+v, want %s cold=%v wait=%s reason ~%q error %q", tt.status, tt.body, r, tt.outcome, tt.cold, tt.wait, tt.reason, tt.agentError)
		}
	}
}

// TestFireResultAtAttempt: a refused token is retried below the bound and
// rejected at it, with a reason naming the status, the agent's code and the
// attempts; other outcomes do not depend on the attempt.
func TestFireResultAtAttempt(t *testing.T) {
	t.Parallel()
	refused := nas.ClassifyAnswer(403, "", []byte(`{"error":"invalid_audience"}`))
	for attempt := 1; attempt <= 5; attempt++ {
		r := refused.AtAttempt(attempt, 4)
		want := agentcall.OutcomeRetry
		if attempt >= 4 {
			want = agentcall.OutcomeRejected
		}
		if r.Outcome != want || !strings.Contains(r.Reason, "403 invalid_audience") {
			t.Errorf("attempt %d: %+v, want %s", attempt, r, want)
		}
		if want == agentcall.OutcomeRejected && !strings.Contains(r.Reason, fmt.Sprintf("refused the fire token %d times", attempt)) {
			t.Errorf("attempt %d: reason %q does not count the attempts", attempt, r.Reason)
		}
	}
	if r := refused.AtAttempt(1, 1); r.Outcome != agentcall.OutcomeRejected {
		t.Errorf("max_auth_attempts 1: %+v", r)
	}
	for _, status := range []int{202, 400, 500, 503} {
		r := nas.ClassifyAnswer(status, "", nil)
		if got := r.AtAttempt(9, 4); got != r {
			t.Errorf("%d changed at attempt 9: %+v", status, got)
		}
	}
}

func reply(status int, body, retryAfter string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// TestAgentCallerIgnoresProxyEnvironment pins that a proxy named in the
// environment is never used: it would dial the agent on NAS's behalf and
// bypass the dial-time address check. Not parallel: it sets the environment
// before any parallel test can read it.
func TestAgentCallerIgnoresProxyEnvironment(t *testing.T) {
	var hits atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(proxy.Close)
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
		t.Setenv(k, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	// An allowlisted name that does not resolve: through the (reachable)
	// proxy it would be delivered; without one it cannot be reached.
	allow, _ := nas.ParseAllowlist([]string{"agent.invalid", "127.0.0.1"})
	c := nas.NewAgentCaller(nas.CallbackPolicy{Allow: allow}, 2*time.Second)
	res := c.Fire(context.Background(), "http://agent.invalid/api/cron/fire", "tok", []byte(`{}`))
	if hits.Load() != 0 || res.Outcome == agentcall.OutcomeDelivered {
		t.Fatalf("the call went through the proxy: %+v, %d proxy hits", res, hits.Load())
	}
}
