package nashttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// redisSetup is setup on a dedicated redis-server (so that pausing it
// freezes no other test), with its engine.
func redisSetup(t *testing.T) (*bundle, *redistest.Server, *relayredis.Engine) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eng, err := relayredis.Open(ctx, srv.URL(), relayredis.Options{Prefix: "nas"})
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
	b, srv, eng := redisSetup(t)
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
