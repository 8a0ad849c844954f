package nashttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// redisSetup is setup on a dedicated redis-server (so that pausing or
// flushing it touches no other test), with its engine opened with opts.
func redisSetup(t *testing.T, opts relayredis.Options) (*bundle, *redistest.Server, *relayredis.Engine) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts.Prefix = "nas"
	eng, err := relayredis.Open(ctx, srv.URL(), opts)
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	b := setup(t, func(_ *nas.Config, o *nas.Options) { o.Engine = eng })
	return b, srv, eng
}

// TestStoppedStoreAnswers503InTime pauses redis-server (SIGSTOP): every
// route that needs the store answers 503 store_unavailable with a
// Retry-After within 2 seconds, not after a hang; once Redis resumes, a
// provision answered 503 and repeated leaves exactly one armed row.
func TestStoppedStoreAnswers503InTime(t *testing.T) {
	t.Parallel()
	b, srv, eng := redisSetup(t, relayredis.Options{})
	fireAt := time.Now().Add(time.Hour).Truncate(time.Second)
	provision := request{method: http.MethodPost, path: contract.PathProvision, token: tokenA, body: b.provisionBody("job", fireAt)}
	other := b.provision(tokenA, "other", fireAt) // a healthy call first: connections in the pool
	relayCall := b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "other", other.ScheduleID, fireAt, 1))

	if err := srv.Pause(); err != nil {
		t.Fatalf("pause: %v", err)
	}
	var wg sync.WaitGroup
	for _, tc := range []struct {
		name string
		h    http.Handler
		r    request
	}{
		{"provision", b.public, provision},
		{"cancel", b.public, request{method: http.MethodPost, path: contract.PathCancel, token: tokenA, body: contract.CancelRequest{JobID: "other"}}},
		{"list", b.public, request{method: http.MethodGet, path: contract.PathList, token: tokenA}},
		{"put armed", b.public, request{method: http.MethodPut, path: contract.PathArmed, token: tokenA,
			body: contract.PutArmedRequest{Armed: []contract.DesiredArm{{JobID: "job", FireAt: contract.NewTime(fireAt), AgentCallbackURL: b.agent.URL(), DedupKey: "job:" + fireAt.UTC().Format(time.RFC3339)}}}}},
		{"relay", b.internal, relayCall},
		{"operator dead letter", b.internal, request{method: http.MethodGet, path: contract.PathOperatorDLQ, token: opToken}},
		{"readyz", b.public, request{method: http.MethodGet, path: contract.PathReadyz}},
	} {
		wg.Go(func() {
			start := time.Now()
			rec := b.do(tc.h, tc.r)
			took := time.Since(start)
			if took > 2*time.Second {
				t.Errorf("%s: answered after %s, want within 2s", tc.name, took)
			}
			if tc.r.path == contract.PathReadyz {
				if rec.Code != http.StatusServiceUnavailable {
					t.Errorf("readyz with the store paused: %d %s, want 503", rec.Code, rec.Body)
				}
				return
			}
			var e contract.Error
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != http.StatusServiceUnavailable || e.Code != contract.CodeStoreUnavailable {
				t.Errorf("%s: %d %s, want 503 store_unavailable", tc.name, rec.Code, rec.Body)
			}
			if rec.Header().Get(contract.HeaderRetryAfter) == "" {
				t.Errorf("%s: no Retry-After", tc.name)
			}
		})
	}
	wg.Wait()

	if err := srv.Resume(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	rec := b.do(b.public, provision)
	if rec.Code != http.StatusOK {
		t.Fatalf("provision repeated after resume: %d %s", rec.Code, rec.Body)
	}
	got := decodeBody[contract.ProvisionResponse](t, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	row, err := eng.Get(ctx, agentA, "job")
	if err != nil || row.ScheduleID != got.ScheduleID || !row.FireAt.Equal(fireAt) {
		t.Fatalf("armed row %+v, %v; want schedule %s at %s", row, err, got.ScheduleID, fireAt)
	}
	st, err := eng.Stats(ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	// job and other (the paused put armed may have cancelled other when
	// Redis resumed: then job is the only one).
	if st.Armed < 1 || st.Armed > 2 {
		t.Fatalf("armed %d after the repeat, want job once (and other)", st.Armed)
	}
	items, _, err := eng.List(ctx, agentA, "", 10)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	n := 0
	for _, it := range items {
		if it.JobID == "job" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d armed rows of job, want 1", n)
	}
}

// TestLostStoreIsReported empties Redis under NAS (as a restart without
// persistence does): /readyz answers 503 naming the store_epoch check and
// chronos_relay_store_lost is 1, until the report ends; then both are
// healthy again.
func TestLostStoreIsReported(t *testing.T) {
	t.Parallel()
	const report = time.Second
	b, srv, _ := redisSetup(t, relayredis.Options{LostReportFor: report, EpochCheck: -1})
	b.provision(tokenA, "job", time.Now().Add(time.Hour))
	readyz := request{method: http.MethodGet, path: contract.PathReadyz}
	metrics := request{method: http.MethodGet, path: contract.PathMetrics}
	ready := func() (int, contract.HealthResponse) {
		rec := b.do(b.public, readyz)
		return rec.Code, decodeBody[contract.HealthResponse](t, rec)
	}
	lostGauge := func() string {
		rec := b.do(b.internal, metrics)
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(line, "chronos_relay_store_lost ") {
				return strings.TrimPrefix(line, "chronos_relay_store_lost ")
			}
		}
		t.Fatalf("no chronos_relay_store_lost in /metrics")
		return ""
	}
	if code, h := ready(); code != http.StatusOK || h.Checks["store_epoch"] != "ok" {
		t.Fatalf("readyz before: %d %+v", code, h)
	}
	if g := lostGauge(); g != "0" {
		t.Fatalf("chronos_relay_store_lost before = %s, want 0", g)
	}

	if err := redistest.ClientOf(t, srv.URL()).FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("flushall: %v", err)
	}
	code, h := ready()
	if code != http.StatusServiceUnavailable || !strings.Contains(h.Checks["store_epoch"], "lost its data") || h.Checks["store"] != "ok" {
		t.Fatalf("readyz after FLUSHALL: %d %+v, want 503 naming store_epoch", code, h)
	}
	if g := lostGauge(); g != "1" {
		t.Fatalf("chronos_relay_store_lost after FLUSHALL = %s, want 1", g)
	}
	// The report ends by itself; the store serves all along.
	b.provision(tokenA, "job", time.Now().Add(time.Hour))
	deadline := time.Now().Add(5 * time.Second)
	for code, _ := ready(); code != http.StatusOK; code, _ = ready() {
		if time.Now().After(deadline) {
			t.Fatal("readyz still failing after the report should have ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if g := lostGauge(); g != "0" {
		t.Fatalf("chronos_relay_store_lost after the report = %s, want 0", g)
	}
}
