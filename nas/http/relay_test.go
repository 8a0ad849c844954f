package nashttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
)

func TestNASRelay(t *testing.T) {
	t.Parallel()
	type want struct {
		status     int
		relay      string // RelayResponse.Status for 200
		agent      string // RelayResponse.AgentStatus
		code       string // error code otherwise
		retryAfter string
		fired      bool // the agent was called
	}
	tests := []struct {
		name   string
		opts   []setupOpt
		answer func(w http.ResponseWriter)
		// prepare may change the world after provisioning; it returns the
		// relay request to send.
		prepare func(t *testing.T, b *bundle, sch string, fireAt time.Time) request
		want    want
	}{
		{name: "delivered", want: want{status: 200, relay: contract.RelayDelivered, agent: contract.FireAccepted, fired: true}},
		{name: "agent says duplicate", answer: answer(200, `{"status":"duplicate"}`, ""),
			want: want{status: 200, relay: contract.RelayDelivered, agent: contract.FireDuplicate, fired: true}},
		{name: "agent says gone", answer: answer(200, `{"status":"gone"}`, ""),
			want: want{status: 200, relay: contract.RelayDelivered, agent: contract.FireGone, fired: true}},
		{name: "agent 404 is rejected", answer: answer(404, `{"error":"not_found"}`, ""),
			want: want{status: 200, relay: contract.RelayRejected, fired: true}},
		{name: "agent 503 retries with its Retry-After", answer: answer(503, `{"error":"temporarily_unavailable"}`, "7"),
			want: want{status: 503, code: contract.CodeAgentUnavailable, retryAfter: "7", fired: true}},
		{name: "agent 429 retries", answer: answer(429, `{"error":"rate_limited"}`, "3"),
			want: want{status: 503, code: contract.CodeAgentUnavailable, retryAfter: "3", fired: true}},
		{name: "agent 425 is down: 503", answer: answer(425, `{"error":"too_early"}`, "4"),
			want: want{status: 503, code: contract.CodeAgentUnavailable, retryAfter: "4", fired: true}},
		{name: "agent 408 is down: 503", answer: answer(408, ``, ""),
			want: want{status: 503, code: contract.CodeAgentUnavailable, retryAfter: "0", fired: true}},
		{name: "agent timing out is down: 503", answer: func(w http.ResponseWriter) {
			time.Sleep(2500 * time.Millisecond) // past delivery_timeout (2s)
			answer(202, `{"status":"accepted"}`, "")(w)
		}, want: want{status: 503, code: contract.CodeAgentUnavailable, retryAfter: "0", fired: true}},
		{name: "callback host that does not resolve is down: 503", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			p := b.provisionBody("job-dns", fireAt)
			p.AgentCallbackURL = "http://agent.does-not-exist.invalid"
			rec := b.do(b.public, request{method: "POST", path: contract.PathProvision, token: tokenA, body: p})
			resp := decodeBody[contract.ProvisionResponse](t, rec)
			return b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-dns", resp.ScheduleID, fireAt, 1))
		}, want: want{status: 503, code: contract.CodeAgentUnavailable, retryAfter: "0"}},
		{name: "agent refusing the token answered: 502", answer: answer(401, `{"error":"invalid_token"}`, ""),
			want: want{status: 502, code: contract.CodeAgentUnavailable, retryAfter: "0", fired: true}},
		{name: "agent 500 retries", answer: answer(500, `oops`, ""),
			want: want{status: 502, code: contract.CodeAgentUnavailable, retryAfter: "0", fired: true}},
		{name: "agent 502 retries with its Retry-After", answer: answer(502, `bad gateway`, "9"),
			want: want{status: 502, code: contract.CodeAgentUnavailable, retryAfter: "9", fired: true}},
		{name: "agent redirect is not followed", answer: func(w http.ResponseWriter) {
			w.Header().Set("Location", "http://169.254.169.254/")
			w.WriteHeader(http.StatusFound)
		}, want: want{status: 200, relay: contract.RelayRejected, fired: true}},
		{name: "agent down is a cold start", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			p := b.provisionBody("job-down", fireAt)
			p.AgentCallbackURL = "http://" + addr
			rec := b.do(b.public, request{method: "POST", path: contract.PathProvision, token: tokenA, body: p})
			resp := decodeBody[contract.ProvisionResponse](t, rec)
			return b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-down", resp.ScheduleID, fireAt, 1))
		}, want: want{status: 503, code: contract.CodeAgentUnavailable, retryAfter: "0"}},
		{name: "cancelled job is dropped", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			b.do(b.public, request{method: "POST", path: contract.PathCancel, token: tokenA, body: contract.CancelRequest{JobID: "job-1"}})
			return b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1))
		}, want: want{status: 200, relay: contract.RelayDropped}},
		{name: "re-armed job's old fire is dropped", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			b.provision(tokenA, "job-1", fireAt.Add(time.Hour))
			return b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1))
		}, want: want{status: 200, relay: contract.RelayDropped}},
		{name: "another agent's job is dropped", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			return b.signedRelay("d-1", time.Now(), relayBody(t, agentB, "job-1", sch, fireAt, 1))
		}, want: want{status: 200, relay: contract.RelayDropped}},
		{name: "stopped instance", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			if err := b.engine.SetInstanceState(context.Background(), instanceA, relay.InstanceStopped); err != nil {
				t.Fatal(err)
			}
			return b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1))
		}, want: want{status: 200, relay: contract.RelayInstanceStopped}},
		{name: "replayed delivery is a duplicate", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			r := b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1))
			if rec := b.do(b.internal, r); rec.Code != 200 {
				t.Fatalf("first delivery: %d %s", rec.Code, rec.Body)
			}
			<-b.agent.notify
			return r
		}, want: want{status: 200, relay: contract.RelayDuplicate}},
		{name: "forged signature", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			body := relayBody(t, agentA, "job-1", sch, fireAt, 1)
			h := contract.WebhookHeaders([][]byte{[]byte("another-secret-of-enough-bytes!!")}, "d-1", time.Now(), body)
			return request{method: "POST", path: contract.PathRelay, body: body, header: h}
		}, want: want{status: 401, code: contract.CodeInvalidSignature}},
		{name: "altered body", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			r := b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1))
			r.body = relayBody(t, agentA, "job-1", sch, fireAt, 2)
			return r
		}, want: want{status: 401, code: contract.CodeInvalidSignature}},
		{name: "old timestamp", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			return b.signedRelay("d-1", time.Now().Add(-6*time.Minute), relayBody(t, agentA, "job-1", sch, fireAt, 1))
		}, want: want{status: 401, code: contract.CodeInvalidSignature}},
		{name: "future timestamp", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			return b.signedRelay("d-1", time.Now().Add(6*time.Minute), relayBody(t, agentA, "job-1", sch, fireAt, 1))
		}, want: want{status: 401, code: contract.CodeInvalidSignature}},
		{name: "unsigned", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			return request{method: "POST", path: contract.PathRelay, body: relayBody(t, agentA, "job-1", sch, fireAt, 1)}
		}, want: want{status: 401, code: contract.CodeInvalidSignature}},
		{name: "signed but malformed", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			r := b.signedRelay("d-1", time.Now(), []byte(`{"schedule_id":"x","extra":1}`))
			r.invalid = true
			return r
		}, want: want{status: 400, code: contract.CodeUnknownField}},
		{name: "content type", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			r := b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1))
			r.header["Content-Type"], r.invalid = "text/plain", true
			return r
		}, want: want{status: 415, code: contract.CodeUnsupportedMediaType}},
		{name: "too large", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			r := b.signedRelay("d-1", time.Now(), []byte(`{"schedule_id":"`+strings.Repeat("x", 70<<10)+`"}`))
			r.invalid = true
			return r
		}, want: want{status: 413, code: contract.CodeBodyTooLarge}},
		{name: "too large, chunked", prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			r := b.signedRelay("d-1", time.Now(), []byte(`{"schedule_id":"`+strings.Repeat("x", 70<<10)+`"}`))
			r.invalid, r.chunked = true, true
			return r
		}, want: want{status: 413, code: contract.CodeBodyTooLarge}},
		{name: "store down", opts: []setupOpt{withBrokenEngine}, prepare: func(t *testing.T, b *bundle, sch string, fireAt time.Time) request {
			return b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", "sch-1", fireAt, 1))
		}, want: want{status: 500, code: contract.CodeServerError}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.opts...)
			fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
			sch := "sch-1"
			if len(tt.opts) == 0 {
				// Arm directly: provision refuses a past fire_at, the relay
				// route does not care when the fire is.
				p := b.provision(tokenA, "job-1", time.Now().Add(time.Hour))
				sch = p.ScheduleID
				b.armAt(t, "job-1", fireAt, &sch)
			}
			if tt.answer != nil {
				b.agent.answer("job-1", tt.answer)
			}
			r := b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1))
			if tt.prepare != nil {
				r = tt.prepare(t, b, sch, fireAt)
			}
			before := len(b.agent.received())
			rec := b.do(b.internal, r)
			if rec.Code != tt.want.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.want.status, rec.Body)
			}
			if tt.want.status == 200 {
				got := decodeBody[contract.RelayResponse](t, rec)
				if got.Status != tt.want.relay || got.AgentStatus != tt.want.agent {
					t.Fatalf("relay answer %+v, want %s/%s", got, tt.want.relay, tt.want.agent)
				}
			} else if code := errCode(t, rec); code != tt.want.code {
				t.Fatalf("error %s, want %s", rec.Body, tt.want.code)
			}
			if ra := rec.Header().Get("Retry-After"); ra != tt.want.retryAfter {
				t.Fatalf("Retry-After %q, want %q", ra, tt.want.retryAfter)
			}
			if fired := len(b.agent.received()) > before; fired != tt.want.fired {
				t.Fatalf("agent called = %v, want %v", fired, tt.want.fired)
			}
			if bad := b.agent.rejected(); len(bad) > 0 {
				t.Fatalf("the agent refused NAS's token: %v", bad)
			}
		})
	}
}

// armAt re-arms job of agent A at fireAt through the engine (a past instant
// the API would refuse) and stores the new schedule id in sch.
func (b *bundle) armAt(t *testing.T, job string, fireAt time.Time, sch *string) {
	t.Helper()
	res, err := b.engine.Arm(context.Background(), armRequest(b, job, fireAt))
	if err != nil {
		t.Fatal(err)
	}
	*sch = res.OneShot.ScheduleID
}

func answer(status int, body, retryAfter string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

func TestNASRelayToken(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{nas.AlgEdDSA, nas.AlgES256, nas.AlgRS256} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *nas.Config, o *nas.Options) {
				c.SigningAlg = alg
				k, err := nas.GenerateKey(alg)
				if err != nil {
					t.Fatal(err)
				}
				set, err := nas.NewKeySet([]*nas.SigningKey{k}, "", alg)
				if err != nil {
					t.Fatal(err)
				}
				o.Keys = nas.NewKeyRing(set)
			})
			fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
			var sch string
			b.armAt(t, "job-1", fireAt, &sch)
			start := time.Now()
			rec := b.do(b.internal, b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 3)))
			if rec.Code != 200 {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			f := <-b.agent.notify
			c := f.Claims
			if c.Issuer != publicURL || c.Audience != "agent:"+instanceA || c.Purpose != "cron_fire" || c.JobID != "job-1" ||
				c.ScheduleID != sch || c.Attempt != 3 || c.FireAt != contract.FormatTime(fireAt) {
				t.Fatalf("claims %+v", c)
			}
			if life := c.ExpiresAt.Sub(c.IssuedAt.Time); life != 90*time.Second {
				t.Fatalf("lifetime %s", life)
			}
			if c.IssuedAt.Before(start.Add(-time.Second)) || !c.NotBefore.Equal(c.IssuedAt.Time) {
				t.Fatalf("iat %s nbf %s", c.IssuedAt, c.NotBefore)
			}
			if f.Body.ScheduleID != sch || f.Body.Attempt != 3 || !f.Body.FireAt.Equal(fireAt) {
				t.Fatalf("fire body %+v", f.Body)
			}
		})
	}
}

// TestNASRelayRefusalsChangeNothing sends forged, altered and stale calls,
// then the genuine one with the same delivery id: the refusals called no
// agent, left the row as it was and did not use up the delivery id.
func TestNASRelayRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	var sch string
	b.armAt(t, "job-1", fireAt, &sch)
	before, err := b.engine.Get(context.Background(), agentA, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	genuine := relayBody(t, agentA, "job-1", sch, fireAt, 1)
	forged := contract.WebhookHeaders([][]byte{[]byte("not-the-relay-secret-at-all-!!!!")}, "d-1", time.Now(), genuine)
	altered := b.signedRelay("d-1", time.Now(), genuine)
	altered.body = relayBody(t, agentA, "job-1", sch, fireAt, 7)
	refusals := []request{
		{method: "POST", path: contract.PathRelay, body: genuine, header: forged},
		altered,
		b.signedRelay("d-1", time.Now().Add(-10*time.Minute), genuine),
		b.signedRelay("d-1", time.Now().Add(10*time.Minute), genuine),
	}
	for i, r := range refusals {
		if rec := b.do(b.internal, r); rec.Code != 401 {
			t.Fatalf("refusal %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if n := len(b.agent.received()); n != 0 {
		t.Fatalf("refused calls reached the agent %d times", n)
	}
	after, err := b.engine.Get(context.Background(), agentA, "job-1")
	if err != nil || after != before {
		t.Fatalf("row changed: %+v -> %+v (%v)", before, after, err)
	}
	rec := b.do(b.internal, b.signedRelay("d-1", time.Now(), genuine))
	if got := decodeBody[contract.RelayResponse](t, rec); rec.Code != 200 || got.Status != contract.RelayDelivered {
		t.Fatalf("genuine call after refusals: %d %+v", rec.Code, got)
	}
}

// TestNASRelaySecretRotation: NAS verifies with every configured secret, so
// a relay still signing with the old one (or only the new one) is accepted.
func TestNASRelaySecretRotation(t *testing.T) {
	t.Parallel()
	oldKey := []byte("the-old-relay-secret-32-bytes!!!")
	b := setup(t, func(c *nas.Config, _ *nas.Options) {
		c.Relay.Secrets = []string{relaySecret, contract.FormatWebhookSecret(oldKey)}
	})
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	var sch string
	b.armAt(t, "job-1", fireAt, &sch)
	for i, key := range [][]byte{oldKey, b.secret} {
		body := relayBody(t, agentA, "job-1", sch, fireAt, i+1)
		h := contract.WebhookHeaders([][]byte{key}, fmt.Sprintf("d-%d", i), time.Now(), body)
		rec := b.do(b.internal, request{method: "POST", path: contract.PathRelay, body: body, header: h})
		if rec.Code != 200 {
			t.Fatalf("secret %d: %d %s", i, rec.Code, rec.Body)
		}
	}
}

// panickingCaller stands for a bug below the handler.
type panickingCaller struct{}

func (panickingCaller) Fire(context.Context, string, string, []byte) agentcall.FireResult {
	panic("caller bug")
}

// TestNASPanicIsAnErrorBody pins that a panic below a handler is answered
// as a documented 500 with the error body, not a dropped connection.
func TestNASPanicIsAnErrorBody(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ *nas.Config, o *nas.Options) { o.Caller = panickingCaller{} })
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	var sch string
	b.armAt(t, "job-1", fireAt, &sch)
	rec := b.do(b.internal, b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1)))
	if rec.Code != http.StatusInternalServerError || errCode(t, rec) != contract.CodeServerError {
		t.Fatalf("panic answered %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "caller bug") {
		t.Fatalf("the panic's text leaked: %s", rec.Body)
	}
}

// TestNASMetricNames pins the documented metric names: fire lag, deliveries
// by outcome, retries, and from the store the dead letter size, the armed
// count and the due backlog.
func TestNASMetricNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.provision(tokenA, "later", time.Now().Add(time.Hour))
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	var sch string
	b.armAt(t, "job-1", fireAt, &sch)
	if rec := b.do(b.internal, b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 2))); rec.Code != 200 {
		t.Fatalf("relay: %d %s", rec.Code, rec.Body)
	}
	rec := b.do(b.internal, request{method: "GET", path: contract.PathMetrics})
	if rec.Code != 200 {
		t.Fatalf("metrics: %d", rec.Code)
	}
	text := rec.Body.String()
	for _, want := range []string{
		"chronos_nas_fire_lag_seconds_bucket{",
		"chronos_nas_fire_lag_seconds_count 1",
		`chronos_nas_deliveries_total{outcome="delivered"} 1`,
		`chronos_nas_deliveries_total{outcome="rejected"} 0`,
		"chronos_nas_retries_total 1",
		"chronos_relay_dead_letter 0",
		"chronos_relay_armed ",
		"chronos_relay_due_backlog ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNASLogKeys pins the stable keys of the JSON log records of a fire
// (at DEBUG): agent_id, job_id, schedule_id, fire_at and attempt.
func TestNASLogKeys(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b := setup(t, func(_ *nas.Config, o *nas.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	var sch string
	b.armAt(t, "job-1", fireAt, &sch)
	if rec := b.do(b.internal, b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1))); rec.Code != 200 {
		t.Fatalf("relay: %d %s", rec.Code, rec.Body)
	}
	want := map[string]any{"agent_id": agentA, "job_id": "job-1", "schedule_id": sch, "fire_at": contract.FormatTime(fireAt), "attempt": float64(1)}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if rec["msg"] != "fire delivered" {
			continue
		}
		for k, v := range want {
			if rec[k] != v {
				t.Errorf("log key %s = %v, want %v", k, rec[k], v)
			}
		}
		return
	}
	t.Fatalf("no fire delivered record in:\n%s", logs.String())
}

// TestNASInfoLogPerFire arms and relays fires with NAS logging at INFO, as
// it runs by default: neither an arm nor a delivered fire writes a line of
// its own (the DEBUG lines carry those; INFO has a summary a minute).
func TestNASInfoLogPerFire(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b := setup(t, func(_ *nas.Config, o *nas.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	before := len(logs.String())
	const fires = 50
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	for i := range fires {
		var sch string
		job := fmt.Sprintf("job-%d", i)
		b.armAt(t, job, fireAt, &sch)
		if rec := b.do(b.internal, b.signedRelay(fmt.Sprintf("d-%d", i), time.Now(), relayBody(t, agentA, job, sch, fireAt, 1))); rec.Code != 200 {
			t.Fatalf("relay: %d %s", rec.Code, rec.Body)
		}
	}
	if n := len(logs.String()) - before; n/fires >= 20 {
		t.Fatalf("%d bytes of INFO log for %d fires (%d per fire), want under 20 per fire:\n%s", n, fires, n/fires, logs.String()[before:])
	}
}
