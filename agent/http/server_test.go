package agenthttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
)

const (
	issuer   = "https://nas.example"
	audience = "agent:inst-1"
)

var (
	quiet = slog.New(slog.DiscardHandler)
	t0    = time.Date(2026, 6, 18, 12, 0, 0, 0, time.UTC)
	slot  = t0.Add(time.Hour) // the first slot of an "every 1h" job created at t0
	now   = slot.Add(time.Second)
)

// counter is a runner that counts runs per job.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) Validate(runner.Payload) error { return nil }
func (c *counter) Run(_ context.Context, req runner.Request) runner.Result {
	c.mu.Lock()
	c.runs[req.JobID]++
	c.mu.Unlock()
	return runner.Result{}
}

func (c *counter) count(job string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[job]
}

type bundle struct {
	rt      *agent.Runtime
	runs    *counter
	key     *fireauthtest.Key
	server  *agenthttp.Server
	handler *apitest.Handler
	// now reads and setNow moves the clock of the runtime, the verifier
	// and the server.
	now    func() time.Time
	setNow func(time.Time)
}

// setup opens a real runtime on a temporary home with job "job-1" (every
// 1h, created at t0, so its next slot is `slot`) and serves it with a real
// verifier over a static key set. The clock reads `now`.
func setup(t *testing.T, verifier agenthttp.FireVerifier, opts ...apitest.Option) *bundle {
	t.Helper()
	b := &bundle{runs: &counter{runs: map[string]int{}}}
	clock := t0
	var mu sync.Mutex
	nowFn := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	b.now = nowFn
	b.setNow = func(t time.Time) { mu.Lock(); clock = t; mu.Unlock() }
	rt, err := agent.Open(context.Background(), agent.Config{
		Home: t.TempDir(), Now: nowFn, Logger: quiet, Runners: map[string]runner.Runner{"count": b.runs},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	b.rt = rt
	if _, _, err := rt.AddJob(context.Background(), agent.JobSpec{ID: "job-1", Schedule: "every 1h", Payload: runner.Payload{Kind: "count"}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clock = now
	mu.Unlock()

	b.key, err = fireauthtest.NewKey("EdDSA", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if verifier == nil {
		jwks, err := fireauthtest.JWKS(b.key)
		if err != nil {
			t.Fatal(err)
		}
		v, err := fireauth.NewStatic(jwks, fireauth.Config{Issuer: issuer, Audience: audience, Now: nowFn, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		verifier = v
	}
	b.server = agenthttp.New(agenthttp.Config{Firer: rt, Verifier: verifier, Logger: quiet, ReadyWait: 50 * time.Millisecond, Now: nowFn})
	b.handler = apitest.New(t, b.server, opts...)
	return b
}

func fireFor(job string, at time.Time) fireauthtest.Fire {
	return fireauthtest.NewFire(issuer, audience, now, contract.FireRequest{JobID: job, FireAt: contract.NewTime(at), ScheduleID: "sch_1", Attempt: 1})
}

func (b *bundle) post(t *testing.T, token string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, contract.PathFire, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return rec
}

func (b *bundle) mint(t *testing.T, f fireauthtest.Fire) string {
	t.Helper()
	tok, err := fireauthtest.Mint(b.key, f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	return v
}

// untouched checks that nothing ran and nothing was claimed for job-1.
func (b *bundle) untouched(t *testing.T) {
	t.Helper()
	j, err := b.rt.Job(context.Background(), "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if j.NextRunAt == nil || !j.NextRunAt.Equal(slot) || len(j.Claims) != 0 {
		t.Fatalf("job-1 was claimed: next_run_at %v, claims %v", j.NextRunAt, j.Claims)
	}
	runs, err := b.rt.Ledger().Runs(context.Background(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 0 || b.runs.count("job-1") != 0 {
		t.Fatalf("something ran: ledger %+v, runner %d", runs, b.runs.count("job-1"))
	}
}

func TestFireAcceptedThenDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	f := fireFor("job-1", slot)
	rec := b.post(t, b.mint(t, f), f.Body)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	got := decode[contract.FireResponse](t, rec)
	if got.Status != contract.FireAccepted || got.JobID != "job-1" || got.RunID == "" {
		t.Fatalf("answer %+v", got)
	}
	run, err := b.rt.Wait(context.Background(), got.RunID, t0)
	if err != nil || run.State != ledger.StateSucceeded {
		t.Fatalf("run %+v, %v", run, err)
	}

	// NAS retries the same delivery (a new token, the same slot): no second run.
	f2 := fireFor("job-1", slot)
	f2.Request.Attempt = 2
	f2 = fireauthtest.NewFire(issuer, audience, now, f2.Request)
	rec = b.post(t, b.mint(t, f2), f2.Body)
	if rec.Code != http.StatusOK || decode[contract.FireResponse](t, rec).Status != contract.FireDuplicate {
		t.Fatalf("retry: %d %s", rec.Code, rec.Body)
	}
	if n := b.runs.count("job-1"); n != 1 {
		t.Fatalf("%d runs, want exactly 1", n)
	}
}

// A fire whose fire_at NAS writes in the agent's provisioned spelling (an
// offset, a fraction) is the same slot: verified, accepted and run once; the
// same slot spelt in UTC again is a duplicate.
func TestFireWithAnOffsetSpelling(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	spelt := slot.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05.000-07:00")
	f := fireauthtest.NewFire(issuer, audience, now, contract.FireRequest{JobID: "job-1", FireAt: contract.NewTimeSpelled(slot, spelt), ScheduleID: "sch_1", Attempt: 1})
	if !bytes.Contains(f.Body, []byte(`"fire_at":"`+spelt+`"`)) {
		t.Fatalf("body %s does not carry %q", f.Body, spelt)
	}
	rec := b.post(t, b.mint(t, f), f.Body)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	run, err := b.rt.Wait(context.Background(), decode[contract.FireResponse](t, rec).RunID, t0)
	if err != nil || run.State != ledger.StateSucceeded || !run.Slot.Equal(slot) {
		t.Fatalf("run %+v, %v", run, err)
	}
	again := fireFor("job-1", slot)
	again.Request.Attempt = 2
	again = fireauthtest.NewFire(issuer, audience, now, again.Request)
	rec = b.post(t, b.mint(t, again), again.Body)
	if rec.Code != http.StatusOK || decode[contract.FireResponse](t, rec).Status != contract.FireDuplicate {
		t.Fatalf("the same slot in UTC: %d %s", rec.Code, rec.Body)
	}
	if n := b.runs.count("job-1"); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

func TestFireUnknownJobIsGone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	f := fireFor("no-such-job", slot)
	rec := b.post(t, b.mint(t, f), f.Body)
	if rec.Code != http.StatusOK || decode[contract.FireResponse](t, rec).Status != contract.FireGone {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// Every token the verifier refuses is a 401, and nothing is claimed or run.
func TestFireRejectionsRunNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, c := range fireauthtest.Rejections {
		t.Run(c.Name, func(t *testing.T) {
			f := fireFor("job-1", slot)
			token, body, err := c.Build(b.key, f)
			if err != nil {
				t.Fatal(err)
			}
			rec := b.post(t, strings.TrimSpace(token), body)
			if rec.Code != http.StatusUnauthorized {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			e := decode[contract.Error](t, rec)
			if e.Code != contract.CodeInvalidToken && e.Code != contract.CodeUnauthenticated {
				t.Fatalf("code %q", e.Code)
			}
			if rec.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
			b.untouched(t)
		})
	}
	// The same harness sees a run when the token is good.
	f := fireFor("job-1", slot)
	if rec := b.post(t, b.mint(t, f), f.Body); rec.Code != http.StatusAccepted {
		t.Fatalf("control: %d %s", rec.Code, rec.Body)
	}
}

func TestFireBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, apitest.ExpectInvalidRequests())
	good := fireFor("job-1", slot)
	tests := []struct {
		name   string
		ctype  string
		token  bool
		body   string
		status int
		code   string
	}{
		{"no token", "application/json", false, string(good.Body), 401, contract.CodeUnauthenticated},
		{"wrong content type", "text/plain", true, string(good.Body), 415, contract.CodeUnsupportedMediaType},
		{"not JSON", "application/json", true, "{", 400, contract.CodeInvalidJSON},
		{"unknown field", "application/json", true, `{"job_id":"job-1","fire_at":"2026-06-18T13:00:00Z","jobId":"x"}`, 400, contract.CodeUnknownField},
		{"duplicate key", "application/json", true, `{"job_id":"job-1","JOB_ID":"job-2","fire_at":"2026-06-18T13:00:00Z"}`, 400, contract.CodeDuplicateKey},
		{"trailing data", "application/json", true, string(good.Body) + `{}`, 400, contract.CodeTrailingData},
		{"missing job_id", "application/json", true, `{"fire_at":"2026-06-18T13:00:00Z","schedule_id":"s","attempt":1}`, 400, contract.CodeInvalidRequest},
		{"bad job_id", "application/json", true, `{"job_id":"a b","fire_at":"2026-06-18T13:00:00Z","schedule_id":"s","attempt":1}`, 400, contract.CodeInvalidJobID},
		{"missing fire_at", "application/json", true, `{"job_id":"job-1","schedule_id":"s","attempt":1}`, 400, contract.CodeInvalidFireAt},
		{"null fire_at", "application/json", true, `{"job_id":"job-1","fire_at":null}`, 400, contract.CodeInvalidFireAt},
		{"lax fire_at", "application/json", true, `{"job_id":"job-1","fire_at":"2026-06-18T13:00:00,5Z"}`, 400, contract.CodeInvalidFireAt},
		{"too large", "application/json", true, `{"job_id":"` + strings.Repeat("a", 20<<10) + `"}`, 413, contract.CodeBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, contract.PathFire, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ctype)
			if tt.token {
				req.Header.Set("Authorization", "Bearer "+b.mint(t, good))
			}
			rec := httptest.NewRecorder()
			b.handler.ServeHTTP(rec, req)
			if rec.Code != tt.status || decode[contract.Error](t, rec).Code != tt.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tt.status, tt.code)
			}
			b.untouched(t)
		})
	}
}

// fakeFirer answers with a fixed result.
type fakeFirer struct {
	res agent.FireResult
	err error
}

func (f fakeFirer) Fire(context.Context, string, time.Time, agent.Trigger) (agent.FireResult, error) {
	return f.res, f.err
}

type allow struct{}

func (allow) VerifyFire(context.Context, string, []byte, contract.FireRequest) error { return nil }

func TestFireCannotClaimNow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		firer  agenthttp.Firer
		drain  bool
		status int
		retry  string
	}{
		{"store busy", fakeFirer{res: agent.FireResult{Status: agent.FireBusy, RetryAfter: 1500 * time.Millisecond, Reason: "store busy"}}, false, 503, "2"},
		{"paused", fakeFirer{res: agent.FireResult{Status: agent.FireBusy, RetryAfter: time.Minute, Reason: "paused"}}, false, 503, "60"},
		{"draining", fakeFirer{}, true, 503, "5"},
		{"store failure", fakeFirer{err: errors.New("disk on fire")}, false, 500, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := agenthttp.New(agenthttp.Config{Firer: tt.firer, Verifier: allow{}, Logger: quiet})
			if tt.drain {
				s.Drain()
			}
			h := apitest.New(t, s)
			f := fireFor("job-1", slot)
			req := httptest.NewRequest(http.MethodPost, contract.PathFire, bytes.NewReader(f.Body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer x")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status || rec.Header().Get("Retry-After") != tt.retry {
				t.Fatalf("%d Retry-After %q: %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
			}
			if strings.Contains(rec.Body.String(), "disk on fire") {
				t.Fatal("an internal error leaked")
			}
		})
	}
}

// While the key set is loading, fires are 503 with Retry-After (NAS
// retries) and /readyz fails; once it loads, both succeed.
func TestReadinessWaitsForTheKeySet(t *testing.T) {
	t.Parallel()
	key, err := fireauthtest.NewKey("EdDSA", "k1")
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := fireauthtest.JWKS(key)
	if err != nil {
		t.Fatal(err)
	}
	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = w.Write(jwks)
	}))
	defer srv.Close()
	v, err := fireauth.New(context.Background(), fireauth.Config{
		JWKSURL: srv.URL, Issuer: issuer, Audience: audience, Logger: quiet,
		Now: func() time.Time { return now }, LoadBackoff: 5 * time.Millisecond, LoadBackoffMax: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	b := setup(t, v)
	b.key = key
	s := agenthttp.New(agenthttp.Config{Firer: b.rt, Verifier: v, Logger: quiet, ReadyWait: 20 * time.Millisecond,
		Checks: map[string]agenthttp.Check{"jwks": func(context.Context) error {
			if !v.Ready() {
				return errors.New("loading NAS's key set")
			}
			return nil
		}}})
	b.handler = apitest.New(t, s)

	ready := func() int {
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, contract.PathReadyz, nil))
		return rec.Code
	}
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d before the keys", code)
	}
	f := fireFor("job-1", slot)
	rec := b.post(t, b.mint(t, f), f.Body)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("fire before the keys: %d %s", rec.Code, rec.Body)
	}
	b.untouched(t)

	up.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if code := ready(); code != http.StatusOK {
		t.Fatalf("readyz %d after the keys", code)
	}
	if rec := b.post(t, b.mint(t, f), f.Body); rec.Code != http.StatusAccepted {
		t.Fatalf("fire after the keys: %d %s", rec.Code, rec.Body)
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	s := agenthttp.New(agenthttp.Config{Firer: fakeFirer{}, Logger: quiet})
	h := apitest.New(t, s, apitest.ExpectInvalidRequests())
	tests := []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, contract.PathHealthz, 200},
		{http.MethodGet, contract.PathReadyz, 200},
		{http.MethodGet, contract.PathFire, 405},
		{http.MethodGet, "/nope", 404},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.status {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, rec.Code, tt.status)
		}
	}
	// Without a verifier (built-in timer), fires are refused with 503.
	f := fireFor("job-1", slot)
	req := httptest.NewRequest(http.MethodPost, contract.PathFire, bytes.NewReader(f.Body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer x")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("no provider: %d", rec.Code)
	}
	if s.Active() != 0 {
		t.Fatalf("%d requests still active", s.Active())
	}
	select {
	case <-s.Activity():
	default:
		t.Fatal("no activity signalled")
	}
}

// TestFireDeferredLogsDurationText: a duration in the agent's JSON log is
// a Go duration string ("1.5s"), not the handler's integer nanoseconds.
func TestFireDeferredLogsDurationText(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))
	firer := fakeFirer{res: agent.FireResult{Status: agent.FireBusy, RetryAfter: 1500 * time.Millisecond, Reason: "store busy"}}
	h := apitest.New(t, agenthttp.New(agenthttp.Config{Firer: firer, Verifier: allow{}, Logger: log}))
	f := fireFor("job-1", slot)
	req := httptest.NewRequest(http.MethodPost, contract.PathFire, bytes.NewReader(f.Body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer x")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != "fire deferred" {
			continue
		}
		if got, ok := rec["retry_after"].(string); !ok || got != "1.5s" {
			t.Fatalf("retry_after = %#v, want the string \"1.5s\": %s", rec["retry_after"], line)
		}
		return
	}
	t.Fatalf("no \"fire deferred\" line in:\n%s", logs.String())
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
