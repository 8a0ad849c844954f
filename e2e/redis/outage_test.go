package redise2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
)

// post sends body to url as the agent with token; it returns the status,
// the Retry-After header, the body and how long the answer took.
func post(t *testing.T, url, token string, body any) (int, string, []byte, time.Duration) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	req.Header.Set(contract.HeaderAuthorization, contract.BearerPrefix+token)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, resp.Header.Get(contract.HeaderRetryAfter), b, time.Since(start)
}

// TestStoppedRedisProvisionAnswers503 freezes redis-server (SIGSTOP) under a
// running `chronos nas`: a provision answers 503 store_unavailable with a
// Retry-After within 2 seconds; after SIGCONT the agent's repeat of the same
// provision succeeds and exactly one row is armed.
func TestStoppedRedisProvisionAnswers503(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	store := srv.URL() + "/0?prefix=outage"
	c := newCluster(t, store, 1)
	_, url := c.startNAS("nas")
	a := c.agents[0]
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	req := contract.ProvisionRequest{JobID: "job", FireAt: contract.NewTime(at), AgentCallbackURL: "http://127.0.0.1:9/cb",
		DedupKey: "job:" + at.Format(time.RFC3339)}

	if err := srv.Pause(); err != nil {
		t.Fatalf("pause redis: %v", err)
	}
	code, retryAfter, body, took := post(t, url+contract.PathProvision, a.token, req)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"error":"store_unavailable"`) {
		t.Fatalf("provision with redis stopped: %d %s, want 503 store_unavailable", code, body)
	}
	if retryAfter == "" || took > 2*time.Second {
		t.Fatalf("provision with redis stopped answered after %s with Retry-After %q, want within 2s with one", took, retryAfter)
	}
	if err := srv.Resume(); err != nil {
		t.Fatalf("resume redis: %v", err)
	}
	code, _, body, _ = post(t, url+contract.PathProvision, a.token, req)
	if code != http.StatusOK {
		t.Fatalf("provision repeated after resume: %d %s", code, body)
	}
	var got contract.ProvisionResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("provision answer %s: %v", body, err)
	}
	e := openStore(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	items, _, err := e.List(ctx, a.id, "", 10)
	if err != nil || len(items) != 1 || items[0].ScheduleID != got.ScheduleID {
		t.Fatalf("armed after the repeat: %+v, %v; want one row, %s", items, err, got.ScheduleID)
	}
}

// TestFlushedRedisIsReported empties redis-server under a running
// `chronos nas` (as a restart without persistence would): /readyz answers
// 503 naming store_epoch, chronos_relay_store_lost is 1 and NAS logs the
// loss as an error, until the report ends.
func TestFlushedRedisIsReported(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	store := srv.URL() + "/0?prefix=lost&lost_report_for=2s"
	c := newCluster(t, store, 1)
	p, url := c.startNAS("nas")
	if err := redistest.ClientOf(t, srv.URL()).FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("flushall: %v", err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	code, body := get(contract.PathReadyz)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"store_epoch":"the store lost its data`) {
		t.Fatalf("readyz after FLUSHALL: %d %s, want 503 naming store_epoch", code, body)
	}
	if _, m := get(contract.PathMetrics); !strings.Contains(m, "\nchronos_relay_store_lost 1\n") {
		t.Fatalf("metrics after FLUSHALL lack chronos_relay_store_lost 1")
	}
	if out := p.out.String(); !strings.Contains(out, `"level":"ERROR","msg":"relay store lost its data`) {
		t.Fatalf("no error log of the lost store:\n%s", lastLines(out, 10))
	}
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := get(contract.PathReadyz); code != http.StatusOK; code, _ = get(contract.PathReadyz) {
		if time.Now().After(deadline) {
			t.Fatal("readyz still failing after the report time")
		}
		time.Sleep(100 * time.Millisecond) // readiness poll interval
	}
	if _, m := get(contract.PathMetrics); !strings.Contains(m, "\nchronos_relay_store_lost 0\n") {
		t.Fatalf("metrics after the report lack chronos_relay_store_lost 0")
	}
}
