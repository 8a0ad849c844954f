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
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
)

// denyAll refuses every token, as the verifier refuses forged ones.
type denyAll struct{}

func (denyAll) VerifyFire(context.Context, string, []byte, contract.FireRequest) error {
	return errors.New("fireauth: token signature is invalid")
}

// TestFireRejectionsLogSampled floods the fire endpoint with forged tokens:
// each is answered 401, the first writes a line, the rest of the minute
// write none, and the first after the minute writes one that counts them.
func TestFireRejectionsLogSampled(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))
	clock := t0
	var cmu sync.Mutex
	nowFn := func() time.Time { cmu.Lock(); defer cmu.Unlock(); return clock }
	firer := fakeFirer{res: agent.FireResult{Status: agent.FireAccepted}}
	h := apitest.New(t, agenthttp.New(agenthttp.Config{Firer: firer, Verifier: denyAll{}, Logger: log, Now: nowFn}))
	post := func() {
		f := fireFor("job-1", slot)
		req := httptest.NewRequest(http.MethodPost, contract.PathFire, bytes.NewReader(f.Body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer forged")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
	rejected := func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		var out []map[string]any
		for line := range strings.Lines(logs.String()) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["msg"] == "fire rejected" {
				out = append(out, rec)
			}
		}
		return out
	}
	const flood = 200
	for range flood {
		post()
	}
	if got := rejected(); len(got) != 1 || got[0]["unlogged"] != nil {
		t.Fatalf("%d lines after %d forged tokens in a minute, want 1 without a count: %v", len(got), flood, got)
	}
	cmu.Lock()
	clock = clock.Add(agenthttp.RejectLogEvery)
	cmu.Unlock()
	post()
	got := rejected()
	if len(got) != 2 || got[1]["unlogged"] != float64(flood-1) {
		t.Fatalf("after the minute: %v, want a second line with unlogged=%d", got, flood-1)
	}
}
