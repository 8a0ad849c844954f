package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
)

// unknownKIDInterval is the agent's least time between two fetches of NAS's
// key set made for unknown kids (fireauth.DefaultUnknownKIDInterval).
const unknownKIDInterval = 10 * time.Second

// postFire POSTs a fire with token straight to an agent and returns the
// status, the Retry-After header and the body.
func postFire(t *testing.T, agentURL, token string, body []byte) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, agentURL+contract.PathFire, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := proxyClient.Do(req)
	if err != nil {
		t.Errorf("fire: %v", err)
		return 0, "", ""
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(data)
}

// agentMetric returns one sample of the agent's /metrics page.
func agentMetric(t *testing.T, agentURL, sample string) float64 {
	t.Helper()
	code, page := httpGet(agentURL + contract.PathMetrics)
	if code != http.StatusOK {
		t.Fatalf("agent metrics: %d %s", code, page)
	}
	if !strings.Contains(page, sample+" ") {
		t.Fatalf("agent metrics lack %s", sample)
	}
	return metricValue(page, sample)
}

const unknownKIDFetches = `chronos_agent_jwks_fetches_total{result="ok",trigger="unknown_kid"}`

// TestGarbageKIDsCannotStarveAKeyRotation: 200 well-formed tokens signed by
// made-up keys under random kids are POSTed to the agent's fire route; then
// a key is generated and activated at NAS (chronos keys generate and
// activate, SIGHUP) and the job's next fire is signed with it. Every garbage
// token is answered 503 with Retry-After (never 401) and the flood costs
// one key set fetch; the real fire is answered 503 while the agent may not
// fetch again, NAS retries it after the Retry-After, and it is delivered and
// runs once.
func TestGarbageKIDsCannotStarveAKeyRotation(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{KeyCheck: 500 * time.Millisecond, RetryBase: 200 * time.Millisecond, RetryMaxDelay: 2 * time.Second})
	agentURL := s.agentURLs[0]
	job := s.addJob("rot", "every 12s")

	// Pick a slot whose fire comes 6 s after the flood: the flood gets the
	// one fetch of the interval, and the slot's fire, signed with the new
	// key, arrives while the agent may not fetch again.
	var slot time.Time
	deadline := time.Now().Add(60 * time.Second)
	for slot.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("found no slot to rotate before")
		}
		fireAt := s.armed(job).FireAt.UTC()
		if flood := fireAt.Add(-6 * time.Second); flood.After(time.Now()) {
			time.Sleep(time.Until(flood))
			slot = fireAt
			break
		}
		time.Sleep(time.Until(fireAt) + 500*time.Millisecond) // the next slot is armed after this one
	}

	before := agentMetric(t, agentURL, unknownKIDFetches)
	var wg sync.WaitGroup
	type answer struct {
		status      int
		retry, body string
	}
	answers := make([]answer, 200)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				f := fireauthtest.NewFire(s.publicURL, "agent:"+instanceID, time.Now(), contract.FireRequest{
					JobID: job, FireAt: contract.NewTime(slot), ScheduleID: "sch_" + rand.Text(), Attempt: 1})
				k, err := fireauthtest.NewKey("EdDSA", "kid-"+rand.Text())
				if err != nil {
					t.Error(err)
					continue
				}
				token, err := fireauthtest.Mint(k, f)
				if err != nil {
					t.Error(err)
					continue
				}
				a := &answers[i]
				a.status, a.retry, a.body = postFire(t, agentURL, token, f.Body)
			}
		})
	}
	for i := range answers {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, a := range answers {
		if a.status != http.StatusServiceUnavailable || a.retry == "" || !strings.Contains(a.body, contract.CodeUnavailable) {
			t.Fatalf("garbage token %d answered %d (Retry-After %q) %s; want 503 with Retry-After", i, a.status, a.retry, a.body)
		}
	}
	if got := agentMetric(t, agentURL, unknownKIDFetches) - before; got != 1 {
		t.Fatalf("the flood cost %v key set fetches, want 1", got)
	}

	kid := strings.TrimSpace(s.mustCLI("keys", "generate", "--out", "keys"))
	s.mustCLI("keys", "activate", "--dir", "keys", kid)
	if err := s.nas.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "NAS to publish the new key", func() (bool, string) {
		_, body := httpGet(s.publicURL + contract.PathJWKS)
		return strings.Contains(body, kid), body
	})
	if time.Now().After(slot) {
		t.Fatalf("the rotation took until after the slot %s", slot.Format(time.RFC3339))
	}

	eventually(t, 30*time.Second, "the slot's fire, signed with the new key, to be delivered and run", func() (bool, string) {
		for _, r := range realRuns(bySlot(foldRuns(readLedger(t, s.home)), job)[slot]) {
			if r.state == "succeeded" {
				return true, ""
			}
		}
		return false, "no succeeded run yet"
	})

	var withNew []fireRecord
	for _, f := range s.proxy.records() {
		if f.status == http.StatusUnauthorized {
			t.Errorf("a fire (kid %s, slot %s) was answered 401: %s", f.kid, f.fireAt.Format(time.RFC3339), f.answer)
		}
		if f.job == job && f.fireAt.Equal(slot) && f.kid == kid {
			withNew = append(withNew, f)
		}
	}
	if len(withNew) < 2 {
		t.Fatalf("the slot's fire was delivered %d times with the new key; want a 503 and then its retry", len(withNew))
	}
	first, last := withNew[0], withNew[len(withNew)-1]
	if first.status != http.StatusServiceUnavailable || first.retryAfter == "" {
		t.Errorf("the first delivery with the new key was answered %d (Retry-After %q) %s; want 503 with Retry-After", first.status, first.retryAfter, first.answer)
	}
	if last.status != http.StatusAccepted {
		t.Errorf("the last delivery with the new key was answered %d %s; want 202", last.status, last.answer)
	}
	if d := last.at.Sub(slot); d > unknownKIDInterval+5*time.Second {
		t.Errorf("the fire was delivered %s after its slot; want within the unknown-kid interval and a retry", d)
	}
	if got := agentMetric(t, agentURL, unknownKIDFetches) - before; got != 2 {
		t.Errorf("%v key set fetches for unknown kids, want 2 (the flood's and the rotation's)", got)
	}
	rs := bySlot(foldRuns(readLedger(t, s.home)), job)[slot]
	if real := realRuns(rs); len(real) != 1 || real[0].state != "succeeded" {
		t.Errorf("slot %s: want one succeeded run, got %s", slot.Format(time.RFC3339), describeRuns(rs))
	}
}

// TestEarlyFireRunsNothing: NAS signs a real fire for a one-shot 900 h
// ahead (the test calls NAS's relay route as a dispatcher would, long before
// the slot). The agent answers 425 too_early with Retry-After, nothing is
// recorded and the job keeps its next_run_at; the agent counts the refusal.
func TestEarlyFireRunsNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{})
	job := s.addJob("far", "in 900h")
	armed := s.armed(job)
	before := readJobs(t, s.home)[job].NextRunAt
	if before == nil || !before.Equal(armed.FireAt.Time) {
		t.Fatalf("next_run_at %v, armed %s", before, armed.FireAt)
	}

	answer := s.postRelay("dlv-early", s.relayCall(armed, 1))
	if strings.Contains(answer, `"status":"delivered"`) {
		t.Fatalf("NAS reports the early fire delivered: %s", answer)
	}
	var got *fireRecord
	for _, f := range s.proxy.records() {
		if f.job == job {
			got = &f
		}
	}
	if got == nil {
		t.Fatalf("the fire never reached the agent; NAS answered %s", answer)
	}
	want := int(time.Until(armed.FireAt.Time) / time.Second)
	var retry int
	if _, err := fmt.Sscan(got.retryAfter, &retry); err != nil || got.status != http.StatusTooEarly ||
		!strings.Contains(got.answer, contract.CodeTooEarly) || retry < want-60 || retry > want+60 {
		t.Fatalf("agent answered %d (Retry-After %q) %s; want 425 too_early with Retry-After about %d s", got.status, got.retryAfter, got.answer, want)
	}
	if lines := readLedger(t, s.home); len(lines) != 0 {
		t.Fatalf("the ledger has %d lines, want none: %+v", len(lines), lines)
	}
	if after := readJobs(t, s.home)[job].NextRunAt; after == nil || !after.Equal(*before) {
		t.Fatalf("next_run_at moved from %s to %v", before, after)
	}
	if n := agentMetric(t, s.agentURLs[0], `chronos_agent_fires_total{outcome="too_early"}`); n != 1 {
		t.Fatalf("the agent counted %v too_early fires, want 1", n)
	}
}
