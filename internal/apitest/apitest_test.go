package apitest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
)

// fakeTB records failures instead of failing the test, so that tests can show
// the helper fails a handler that breaks the contract. Logs go to the real t.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (f *fakeTB) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, s)
}

func (f *fakeTB) Errorf(format string, args ...any) { f.record(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Error(args ...any)                 { f.record(fmt.Sprint(args...)) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (f *fakeTB) Fatal(args ...any) {
	f.record(fmt.Sprint(args...))
	runtime.Goexit()
}
func (f *fakeTB) Fail()        { f.record("Fail") }
func (f *fakeTB) FailNow()     { f.record("FailNow"); runtime.Goexit() }
func (f *fakeTB) Failed() bool { return len(f.Failures()) > 0 }

// Failures returns what was reported so far.
func (f *fakeTB) Failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.failures...)
}

// answer returns a handler that writes status, the headers and body as given.
func answer(status int, contentType, body string, headers ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

func writeJSON(status int, v any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		contract.WriteJSON(w, status, v)
	})
}

func writeError(e *contract.Error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		contract.WriteError(w, e)
	})
}

const (
	jsonCT        = "application/json"
	goodProvision = `{"job_id":"ab12cd34","fire_at":"2026-06-18T12:34:56+00:00","agent_callback_url":"https://agent.example.com","dedup_key":"ab12cd34:2026-06-18T12:34:56+00:00"}`
	goodFire      = `{"job_id":"ab12cd34","fire_at":"2026-06-18T12:34:56Z","schedule_id":"s1","attempt":1}`
	goodRelay     = `{"schedule_id":"s1","agent_id":"a1","job_id":"ab12cd34","fire_at":"2026-06-18T12:34:56Z","attempt":2}`
)

var fireAt = contract.NewTime(time.Date(2026, 6, 18, 12, 34, 56, 0, time.UTC))

func cursor(s string) *string { return &s }

type exchangeCase struct {
	name    string
	method  string
	path    string
	ct      string
	body    string
	invalid bool // marked with ExpectInvalid
	handler http.Handler
	// wantFail is a substring of the expected failure; "" means no failure.
	wantFail       string
	wantViolations int
}

var exchangeCases = []exchangeCase{
	// Conforming exchanges.
	{name: "healthz", method: "GET", path: "/healthz", handler: writeJSON(200, contract.HealthResponse{Status: "ok"})},
	{name: "readyz 503", method: "GET", path: "/readyz", handler: writeJSON(503, contract.HealthResponse{Status: "unavailable", Checks: map[string]string{"store": "down"}})},
	{name: "metrics text", method: "GET", path: "/metrics", handler: answer(200, "text/plain; version=0.0.4; charset=utf-8", "# HELP x y\nx 1\n")},
	{name: "provision ok", method: "POST", path: contract.PathProvision, ct: jsonCT, body: goodProvision,
		handler: writeJSON(200, contract.ProvisionResponse{ScheduleID: "s1", FireAt: fireAt, Armed: true})},
	{name: "provision charset", method: "POST", path: contract.PathProvision, ct: "application/json; charset=utf-8", body: goodProvision,
		handler: writeJSON(200, contract.ProvisionResponse{ScheduleID: "s1", FireAt: fireAt, Armed: true})},
	{name: "provision 401 without token", method: "POST", path: contract.PathProvision, ct: jsonCT, body: goodProvision,
		handler: writeError(&contract.Error{Code: contract.CodeUnauthenticated, Description: "missing bearer token"})},
	{name: "provision 429 with Retry-After", method: "POST", path: contract.PathProvision, ct: jsonCT, body: goodProvision,
		handler: writeError(&contract.Error{Code: contract.CodeRateLimited, RetryAfter: 1500 * time.Millisecond})},
	{name: "list last page", method: "GET", path: contract.PathList + "?limit=50",
		handler: writeJSON(200, contract.ListResponse{Armed: []contract.ArmedJob{{JobID: "j", FireAt: fireAt, ScheduleID: "s", AgentCallbackURL: "https://a.example.com"}}, FailedFires: []contract.FailedFire{}})},
	{name: "list with a huge limit (clamped)", method: "GET", path: contract.PathList + "?limit=1000000",
		handler: writeJSON(200, contract.ListResponse{Armed: []contract.ArmedJob{}, NextCursor: cursor("next"), FailedFires: []contract.FailedFire{}})},
	{name: "failed fires ack", method: "POST", path: contract.PathFailedFiresAck, ct: jsonCT, body: `{"schedule_ids":["sch_1","sch_2"]}`,
		handler: writeJSON(200, contract.FailedFiresAckResponse{OK: true, Acknowledged: 1})},
	{name: "list with cursor", method: "GET", path: contract.PathList + "?cursor=abc",
		handler: writeJSON(200, contract.ListResponse{Armed: []contract.ArmedJob{}, NextCursor: cursor("next"), FailedFires: []contract.FailedFire{}})},
	{name: "operator stop", method: "POST", path: "/api/operator/instances/inst-1/stop",
		handler: writeJSON(200, contract.InstanceStateResponse{InstanceID: "inst-1", Stopped: true})},
	{name: "relay delivered", method: "POST", path: contract.PathRelay, ct: jsonCT, body: goodRelay,
		handler: writeJSON(200, contract.RelayResponse{Status: contract.RelayDelivered, AgentStatus: contract.FireAccepted})},
	{name: "relay 503 with Retry-After", method: "POST", path: contract.PathRelay, ct: jsonCT, body: goodRelay,
		handler: writeError(&contract.Error{Code: contract.CodeAgentUnavailable, RetryAfter: 3 * time.Second})},
	{name: "fire accepted", method: "POST", path: contract.PathFire, ct: jsonCT, body: goodFire,
		handler: writeJSON(202, contract.FireResponse{Status: contract.FireAccepted, JobID: "ab12cd34", RunID: "r1"})},
	{name: "fire gone", method: "POST", path: contract.PathFire, ct: jsonCT, body: goodFire,
		handler: writeJSON(200, contract.FireResponse{Status: contract.FireGone})},

	// Broken responses: the helper must fail these.
	{name: "undocumented status", method: "GET", path: "/healthz", handler: answer(418, jsonCT, `{"error":"teapot"}`),
		wantFail: "is not documented"},
	{name: "undocumented status on provision", method: "POST", path: contract.PathProvision, ct: jsonCT, body: goodProvision,
		handler: writeError(&contract.Error{Status: 409, Code: "conflict"}), wantFail: "is not documented"},
	{name: "wrong body shape", method: "POST", path: contract.PathProvision, ct: jsonCT, body: goodProvision,
		handler: answer(200, jsonCT, `{"schedule_id":5,"fire_at":"2026-06-18T12:34:56Z","armed":true}`), wantFail: "doesn't match schema"},
	{name: "missing required field", method: "POST", path: contract.PathProvision, ct: jsonCT, body: goodProvision,
		handler: answer(200, jsonCT, `{"schedule_id":"s1","armed":true}`), wantFail: "doesn't match schema"},
	{name: "zero time written as null", method: "POST", path: contract.PathProvision, ct: jsonCT, body: goodProvision,
		handler: writeJSON(200, contract.ProvisionResponse{ScheduleID: "s1", Armed: true}), wantFail: "doesn't match schema"},
	{name: "nil slice written as null", method: "GET", path: contract.PathList,
		handler: writeJSON(200, contract.ListResponse{FailedFires: []contract.FailedFire{}}), wantFail: "doesn't match schema"},
	{name: "unknown relay status", method: "POST", path: contract.PathRelay, ct: jsonCT, body: goodRelay,
		handler: writeJSON(200, contract.RelayResponse{Status: "sent"}), wantFail: "doesn't match schema"},
	{name: "accepted with 200", method: "POST", path: contract.PathFire, ct: jsonCT, body: goodFire,
		handler: writeJSON(200, contract.FireResponse{Status: contract.FireAccepted, JobID: "j", RunID: "r"}), wantFail: "doesn't match schema"},
	{name: "error without code", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{"job_id":"j"}`,
		handler: answer(400, jsonCT, `{"error_description":"bad"}`), wantFail: "doesn't match schema"},
	{name: "429 without Retry-After", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{"job_id":"j"}`,
		handler: writeError(&contract.Error{Code: contract.CodeRateLimited}), wantFail: "Retry-After"},
	{name: "503 without Retry-After", method: "POST", path: contract.PathFire, ct: jsonCT, body: goodFire,
		handler: writeError(&contract.Error{Code: contract.CodeUnavailable}), wantFail: "Retry-After"},
	{name: "wrong response content type", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{"job_id":"j"}`,
		handler: answer(200, "text/plain", `{"ok":true}`), wantFail: "Content-Type"},
	{name: "no response content type", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{"job_id":"j"}`,
		handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			_, _ = w.Write([]byte(`{"ok":true}`))
		}),
		wantFail: "Content-Type"},
	{name: "empty body", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{"job_id":"j"}`,
		handler: answer(200, jsonCT, ""), wantFail: "response"},

	// Broken requests.
	{name: "undocumented path", method: "GET", path: "/api/nope", handler: writeError(&contract.Error{Code: contract.CodeNotFound}),
		wantFail: "undocumented route"},
	{name: "undocumented method", method: "DELETE", path: contract.PathCancel, handler: writeError(&contract.Error{Code: contract.CodeMethodNotAllowed}),
		wantFail: "undocumented route"},
	{name: "unknown field sent", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{"job_id":"j","x":1}`,
		handler: writeJSON(200, contract.OKResponse{OK: true}), wantFail: "request POST /api/agent-cron/cancel violates"},
	{name: "limit out of range", method: "GET", path: contract.PathList + "?limit=0",
		handler: writeJSON(200, contract.ListResponse{Armed: []contract.ArmedJob{}, FailedFires: []contract.FailedFire{}}), wantFail: "limit"},

	// Deliberately invalid requests: recorded, and the response still counts.
	{name: "expected unknown field", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{"job_id":"j","x":1}`, invalid: true,
		handler: writeError(contract.BadRequest(contract.CodeUnknownField, "unknown field %q", "x")), wantViolations: 1},
	{name: "expected wrong content type", method: "POST", path: contract.PathFire, ct: "text/plain", body: goodFire, invalid: true,
		handler: writeError(&contract.Error{Code: contract.CodeUnsupportedMediaType, Status: 415}), wantViolations: 1},
	{name: "expected not JSON", method: "POST", path: contract.PathRelay, ct: jsonCT, body: `{"schedule_id":`, invalid: true,
		handler: writeError(contract.BadRequest(contract.CodeInvalidJSON, "not JSON")), wantViolations: 1},
	{name: "expected undocumented path answered 404", method: "GET", path: "/api/nope", invalid: true,
		handler: writeError(&contract.Error{Code: contract.CodeNotFound}), wantViolations: 1},
	{name: "expected invalid but answered with a bad error body", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{}`, invalid: true,
		handler: answer(400, jsonCT, `{"message":"bad"}`), wantViolations: 1, wantFail: "doesn't match schema"},
	{name: "expected invalid but undocumented status", method: "POST", path: contract.PathCancel, ct: jsonCT, body: `{}`, invalid: true,
		handler: writeError(&contract.Error{Status: 409, Code: "conflict"}), wantViolations: 1, wantFail: "is not documented"},
	{name: "undocumented path answered 200", method: "GET", path: "/api/nope", invalid: true,
		handler: writeJSON(200, contract.OKResponse{OK: true}), wantViolations: 1, wantFail: "undocumented route"},
	{name: "undocumented path with a bad error body", method: "GET", path: "/api/nope", invalid: true,
		handler: answer(404, "text/plain", "404 page not found"), wantViolations: 1, wantFail: "Content-Type"},
}

func checkOutcome(t *testing.T, tc exchangeCase, failures []string, violations []error) {
	t.Helper()
	for _, f := range failures {
		t.Logf("reported: %.300s", f)
	}
	switch {
	case tc.wantFail == "" && len(failures) > 0:
		t.Errorf("want no failure, got %q", failures)
	case tc.wantFail != "" && len(failures) == 0:
		t.Errorf("want a failure mentioning %q, got none", tc.wantFail)
	case tc.wantFail != "" && !strings.Contains(strings.Join(failures, "\n"), tc.wantFail):
		t.Errorf("want a failure mentioning %q, got %q", tc.wantFail, failures)
	}
	if len(violations) != tc.wantViolations {
		t.Errorf("recorded %d request violations %v, want %d", len(violations), violations, tc.wantViolations)
	}
}

func newRequest(tc exchangeCase, base string) *http.Request {
	var body io.Reader
	if tc.body != "" {
		body = strings.NewReader(tc.body)
	}
	r := httptest.NewRequest(tc.method, base+tc.path, body)
	if tc.ct != "" {
		r.Header.Set("Content-Type", tc.ct)
	}
	if tc.invalid {
		r = apitest.ExpectInvalid(r)
	}
	return r
}

func TestHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range exchangeCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTB{TB: t}
			h := apitest.New(ft, tc.handler)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, newRequest(tc, ""))
			checkOutcome(t, tc, ft.Failures(), h.Violations())
			if h.Exchanges() != 1 {
				t.Errorf("Exchanges() = %d, want 1", h.Exchanges())
			}
		})
	}
}

func TestTransport(t *testing.T) {
	t.Parallel()
	for _, tc := range exchangeCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			ft := &fakeTB{TB: t}
			rt := apitest.Transport(ft, srv.Client().Transport)
			req := newRequest(tc, srv.URL)
			req.RequestURI = ""
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatalf("reading the response: %v", err)
			}
			want := httptest.NewRecorder()
			tc.handler.ServeHTTP(want, newRequest(tc, ""))
			if string(got) != want.Body.String() {
				t.Errorf("the caller read %q, want the server's %q", got, want.Body.String())
			}
			checkOutcome(t, tc, ft.Failures(), rt.Violations())
		})
	}
}

// A wrapped handler behind a real server: the option marks every request.
func TestHandlerBehindServer(t *testing.T) {
	t.Parallel()
	ft := &fakeTB{TB: t}
	h := apitest.New(ft, writeError(contract.BadRequest(contract.CodeInvalidJSON, "body is not valid JSON")), apitest.ExpectInvalidRequests())
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+contract.PathProvision, jsonCT, strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if f := ft.Failures(); len(f) > 0 {
		t.Errorf("want no failure, got %q", f)
	}
	if v := h.Violations(); len(v) != 1 {
		t.Errorf("violations = %v, want one", v)
	}
}

// The wrapped handler sees the request as sent: body, Content-Length (also
// unknown, for a chunked body) and headers.
func TestHandlerPassesRequestThrough(t *testing.T) {
	t.Parallel()
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			t.Parallel()
			var gotBody string
			var gotLen int64
			var gotAuth string
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				gotBody, gotLen, gotAuth = string(b), r.ContentLength, r.Header.Get("Authorization")
				contract.WriteJSON(w, 200, contract.OKResponse{OK: true})
			})
			h := apitest.New(t, inner)
			srv := httptest.NewServer(h)
			defer srv.Close()
			body := io.Reader(strings.NewReader(`{"job_id":"j"}`))
			if chunked {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, err := http.NewRequest("POST", srv.URL+contract.PathCancel, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", jsonCT)
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			wantLen := int64(len(`{"job_id":"j"}`))
			if chunked {
				wantLen = -1
			}
			if gotBody != `{"job_id":"j"}` || gotLen != wantLen || gotAuth != "Bearer tok" {
				t.Errorf("handler saw body %q, length %d, auth %q; want the request as sent (length %d)", gotBody, gotLen, gotAuth, wantLen)
			}
			if h.Exchanges() != 1 {
				t.Errorf("Exchanges() = %d, want 1", h.Exchanges())
			}
		})
	}
}

func TestClient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(writeJSON(200, contract.JWKS{Keys: []contract.JWK{{Kty: "OKP", Kid: "k1", Crv: "Ed25519", X: "abc", Alg: "EdDSA", Use: "sig"}}}))
	defer srv.Close()
	resp, err := apitest.Client(t).Get(srv.URL + contract.PathJWKS)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestWithSpecInvalid(t *testing.T) {
	t.Parallel()
	ft := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		apitest.New(ft, http.NotFoundHandler(), apitest.WithSpec([]byte("openapi: 3.0.3\npaths: 7\n")))
		t.Error("New returned for a description that does not load")
	}()
	<-done
	if len(ft.Failures()) != 1 {
		t.Errorf("failures = %q, want one", ft.Failures())
	}
}
