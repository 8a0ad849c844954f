package agenthttp_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
)

// reconcileBundle serves the reconcile route with a real verifier and
// counts the reconciles it asks for.
type reconcileBundle struct {
	key     *fireauthtest.Key
	server  *agenthttp.Server
	handler *apitest.Handler
	asked   atomic.Int64
	reasons chan string
}

func reconcileSetup(t *testing.T, configured bool, opts ...apitest.Option) *reconcileBundle {
	t.Helper()
	b := &reconcileBundle{reasons: make(chan string, 10)}
	var err error
	b.key, err = fireauthtest.NewKey("ES256", "k1")
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := fireauthtest.JWKS(b.key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := fireauth.NewStatic(jwks, fireauth.Config{Issuer: issuer, Audience: audience, Now: func() time.Time { return now }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cfg := agenthttp.Config{Firer: nil, Verifier: v, Logger: quiet}
	if configured {
		cfg.ReconcileVerifier = v
		cfg.Reconcile = func(reason string) {
			b.asked.Add(1)
			b.reasons <- reason
		}
	}
	b.server = agenthttp.New(cfg)
	b.handler = apitest.New(t, b.server, opts...)
	return b
}

func (b *reconcileBundle) post(token, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, contract.PathReconcile, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return rec
}

func TestReconcileRequestIsAcceptedAndHandedOn(t *testing.T) {
	t.Parallel()
	b := reconcileSetup(t, true)
	r := fireauthtest.NewReconcile(issuer, audience, now, "inst-1")
	token, err := fireauthtest.MintReconcile(b.key, r)
	if err != nil {
		t.Fatal(err)
	}
	rec := b.post(token, "application/json", r.Body)
	if rec.Code != http.StatusAccepted || decode[contract.ReconcileResponse](t, rec).Status != contract.ReconcileStatusReconciling {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got := <-b.reasons; got != contract.ReconcileReasonInstanceStarted {
		t.Fatalf("reason %q", got)
	}
}

// Every refused request is answered with its status and asks for nothing.
func TestReconcileRequestRefusals(t *testing.T) {
	t.Parallel()
	b := reconcileSetup(t, true, apitest.ExpectInvalidRequests())
	r := fireauthtest.NewReconcile(issuer, audience, now, "inst-1")
	good, err := fireauthtest.MintReconcile(b.key, r)
	if err != nil {
		t.Fatal(err)
	}
	f := fireFor("job-1", slot)
	fireToken, err := fireauthtest.Mint(b.key, f)
	if err != nil {
		t.Fatal(err)
	}
	otherBody := []byte(`{"instance_id":"inst-2","reason":"instance_started"}`)
	for _, tc := range []struct {
		name        string
		token, ct   string
		body        []byte
		status      int
		code, cause string
	}{
		{"no token", "", "application/json", r.Body, 401, contract.CodeUnauthenticated, "bearer"},
		{"a fire's body", fireToken, "application/json", f.Body, 400, contract.CodeUnknownField, "job_id"},
		{"a fire token with a reconcile body", fireToken, "application/json", r.Body, 401, contract.CodeInvalidToken, "typ header"},
		{"the body of another request", good, "application/json", otherBody, 401, contract.CodeInvalidToken, "bh"},
		{"not JSON", good, "application/json", []byte(`nope`), 400, contract.CodeInvalidJSON, ""},
		{"an unknown field", good, "application/json", []byte(`{"instance_id":"i","reason":"x","more":1}`), 400, contract.CodeUnknownField, ""},
		{"no reason", good, "application/json", []byte(`{"instance_id":"i"}`), 400, contract.CodeInvalidRequest, "reason"},
		{"a text body", good, "text/plain", r.Body, 415, contract.CodeUnsupportedMediaType, ""},
		{"too large", good, "application/json", []byte(`{"instance_id":"` + strings.Repeat("x", 17<<10) + `","reason":"x"}`), 413, contract.CodeBodyTooLarge, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := b.post(tc.token, tc.ct, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			e := decode[contract.Error](t, rec)
			if e.Code != tc.code || !strings.Contains(e.Description, tc.cause) {
				t.Fatalf("error %+v, want %s naming %q", e, tc.code, tc.cause)
			}
		})
	}
	if n := b.asked.Load(); n != 0 {
		t.Fatalf("%d reconciles asked for by refused requests", n)
	}
	// The same harness hands a good one on.
	if rec := b.post(good, "application/json", r.Body); rec.Code != http.StatusAccepted {
		t.Fatalf("control: %d %s", rec.Code, rec.Body)
	}
}

func TestReconcileRequestUnavailable(t *testing.T) {
	t.Parallel()
	r := fireauthtest.NewReconcile(issuer, audience, now, "inst-1")
	t.Run("not configured", func(t *testing.T) {
		b := reconcileSetup(t, false)
		token, _ := fireauthtest.MintReconcile(b.key, r)
		rec := b.post(token, "application/json", r.Body)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("%d %v %s", rec.Code, rec.Header(), rec.Body)
		}
	})
	t.Run("draining", func(t *testing.T) {
		b := reconcileSetup(t, true)
		b.server.Drain()
		token, _ := fireauthtest.MintReconcile(b.key, r)
		rec := b.post(token, "application/json", r.Body)
		if rec.Code != http.StatusServiceUnavailable || b.asked.Load() != 0 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	})
}

// A fire for an instant before the job's next slot that is not one of its
// slots is a refresh fire: 200 refreshed, nothing claimed, run or recorded.
func TestRefreshFireIsAnsweredRefreshed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	f := fireFor("job-1", t0.Add(30*time.Minute))
	rec := b.post(t, b.mint(t, f), f.Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if got := decode[contract.FireResponse](t, rec); got.Status != contract.FireRefreshed || got.JobID != "job-1" {
		t.Fatalf("answer %+v", got)
	}
	b.untouched(t)
	// Once the slot ran, a fire for it again is a duplicate (one of the
	// schedule's slots), never a refresh.
	real := fireFor("job-1", slot)
	if rec := b.post(t, b.mint(t, real), real.Body); rec.Code != http.StatusAccepted {
		t.Fatalf("the slot's fire: %d %s", rec.Code, rec.Body)
	}
	again := fireFor("job-1", slot)
	again.Request.Attempt = 2
	again = fireauthtest.NewFire(issuer, audience, now, again.Request)
	if rec := b.post(t, b.mint(t, again), again.Body); decode[contract.FireResponse](t, rec).Status != contract.FireDuplicate {
		t.Fatalf("the slot's fire again: %d %s", rec.Code, rec.Body)
	}
}
