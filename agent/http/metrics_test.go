package agenthttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
)

// A validly signed fire for a slot far ahead of the agent's clock is refused
// with 425 and Retry-After the seconds until the slot; nothing is claimed,
// run or recorded, and the job keeps its next_run_at. Just inside the
// allowed skew a fire runs; just outside it is refused.
func TestFireTooEarlyRunsNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		clock  time.Time // the agent's clock when the fire arrives
		fireAt time.Time
		status int
		retry  string
	}{
		{"900 h ahead", now, slot.Add(900 * time.Hour), http.StatusTooEarly, strconv.Itoa(int((slot.Add(900*time.Hour).Sub(now) + time.Second - 1) / time.Second))},
		{"31 s ahead", slot.Add(-31 * time.Second), slot, http.StatusTooEarly, "31"},
		{"30.5 s ahead", slot.Add(-30500 * time.Millisecond), slot, http.StatusTooEarly, "31"},
		{"29 s ahead (within the skew)", slot.Add(-29 * time.Second), slot, http.StatusAccepted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.setNow(tt.clock)
			f := fireFor("job-1", tt.fireAt)
			f.Now = tt.clock
			rec := b.post(t, b.mint(t, f), f.Body)
			if rec.Code != tt.status || rec.Header().Get("Retry-After") != tt.retry {
				t.Fatalf("%d Retry-After %q: %s; want %d %q", rec.Code, rec.Header().Get("Retry-After"), rec.Body, tt.status, tt.retry)
			}
			if tt.status == http.StatusAccepted {
				return
			}
			if e := decode[contract.Error](t, rec); e.Code != contract.CodeTooEarly {
				t.Fatalf("code %q, want %q", e.Code, contract.CodeTooEarly)
			}
			b.untouched(t)
		})
	}
}

// scrape GETs /metrics through h (checked against openapi.yaml) and returns
// the page.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, contract.PathMetrics, nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	return rec.Body.String()
}

// sample returns the value of sample (name with labels, as printed) on page,
// and whether it is there.
func sample(page, name string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		return v, err == nil
	}
	return 0, false
}

func wantSample(t *testing.T, page, name string, want float64) {
	t.Helper()
	got, ok := sample(page, name)
	if !ok {
		t.Errorf("%s is missing", name)
		return
	}
	if got != want {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// Every answer of the fire route is counted by outcome, and the runs the
// ledger records by status.
func TestMetricsCountFiresAndRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, apitest.ExpectInvalidRequests())
	f := fireFor("job-1", slot)
	rec := b.post(t, b.mint(t, f), f.Body)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("fire: %d %s", rec.Code, rec.Body)
	}
	if run, err := b.rt.Wait(context.Background(), decode[contract.FireResponse](t, rec).RunID, t0); err != nil || run.State != ledger.StateSucceeded {
		t.Fatalf("run %+v, %v", run, err)
	}
	answers := []struct {
		name   string
		token  string
		fire   func() (string, []byte)
		status int
	}{
		{"duplicate", "", func() (string, []byte) { return b.mint(t, f), f.Body }, http.StatusOK},
		{"gone", "", func() (string, []byte) { g := fireFor("nope", slot); return b.mint(t, g), g.Body }, http.StatusOK},
		{"no token", "", func() (string, []byte) { return "", f.Body }, http.StatusUnauthorized},
		{"bad token", "", func() (string, []byte) { return "x.y.z", f.Body }, http.StatusUnauthorized},
		{"too early", "", func() (string, []byte) {
			e := fireFor("job-1", slot.Add(24*time.Hour))
			return b.mint(t, e), e.Body
		}, http.StatusTooEarly},
		{"not JSON", "", func() (string, []byte) { return b.mint(t, f), []byte("{") }, http.StatusBadRequest},
	}
	for _, a := range answers {
		token, body := a.fire()
		if rec := b.post(t, token, body); rec.Code != a.status {
			t.Fatalf("%s: %d %s, want %d", a.name, rec.Code, rec.Body, a.status)
		}
	}
	// A notification line is not a run.
	for _, st := range []ledger.State{ledger.StateSent, ledger.StateDead} {
		note := ledger.Entry{Time: now, RunID: "r-note", JobID: "job-1", State: st, Kind: ledger.KindNotification, Notification: "ntf_x"}
		if err := b.rt.Ledger().Append(context.Background(), note); err != nil {
			t.Fatal(err)
		}
	}
	page := scrape(t, b.handler)
	for _, st := range []string{"sent", "dead"} {
		if _, ok := sample(page, fmt.Sprintf(`chronos_agent_runs_total{status=%q}`, st)); ok {
			t.Errorf("a notification line was counted as a run (%s)", st)
		}
		wantSample(t, page, fmt.Sprintf(`chronos_agent_notifications_total{result=%q}`, st), 1)
	}
	for outcome, n := range map[string]float64{
		agenthttp.OutcomeAccepted: 1, agenthttp.OutcomeDuplicate: 1, agenthttp.OutcomeGone: 1,
		agenthttp.OutcomeUnauthorized: 2, agenthttp.OutcomeTooEarly: 1, agenthttp.OutcomeInvalid: 1,
		agenthttp.OutcomeUnavailable: 0, agenthttp.OutcomeError: 0,
	} {
		wantSample(t, page, fmt.Sprintf(`chronos_agent_fires_total{outcome=%q}`, outcome), n)
	}
	wantSample(t, page, `chronos_agent_runs_total{status="succeeded"}`, 1)
	wantSample(t, page, `chronos_agent_runs_total{status="failed"}`, 0)
	wantSample(t, page, `chronos_agent_store_writable`, 1)
	// The static key set was "fetched" when the verifier was made, at now.
	wantSample(t, page, `chronos_agent_jwks_age_seconds`, 0)
	b.setNow(now.Add(90 * time.Second))
	wantSample(t, scrape(t, b.handler), `chronos_agent_jwks_age_seconds`, 90)
	// Without a reconciler there is no sync to report.
	for _, name := range []string{"chronos_agent_in_sync", "chronos_agent_reconcile_errors_total"} {
		if _, ok := sample(page, name); ok {
			t.Errorf("%s reported without a reconciler", name)
		}
	}
}

// readyz GETs /readyz through h and returns the status and checks.
func readyz(t *testing.T, h http.Handler) (int, map[string]string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, contract.PathReadyz, nil))
	return rec.Code, decode[contract.HealthResponse](t, rec).Checks
}

// /readyz and chronos_agent_store_writable follow the store probe. The
// probe creates, writes, syncs and removes a file in the home and in its
// runs/ directory; the test makes runs/ unusable by putting a file in its
// place. (The tests run as root, for whom a read-only mode bit changes
// nothing; a read-only mount or a full disk fails the same create or write
// the probe makes, but is not staged here.)
func TestReadyzFailsWhileTheStoreIsNotWritable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	runs := b.rt.Ledger().Dir()
	if code, checks := readyz(t, b.handler); code != http.StatusOK || checks["store"] != "ok" {
		t.Fatalf("readyz %d %v, want 200 with store ok", code, checks)
	}

	aside := runs + ".aside"
	if err := os.Rename(runs, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runs, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The last probe stands for a second: probing is not free, and the
	// route is public.
	if code, _ := readyz(t, b.handler); code != http.StatusOK {
		t.Fatalf("readyz %d within a second of the last probe", code)
	}
	b.setNow(now.Add(2 * time.Second))
	code, checks := readyz(t, b.handler)
	if code != http.StatusServiceUnavailable || !strings.Contains(checks["store"], "not writable") {
		t.Fatalf("readyz %d %v, want 503 naming the store", code, checks)
	}
	if strings.Contains(checks["store"], filepath.Dir(runs)) {
		t.Fatalf("the public readiness answer names the home: %q", checks["store"])
	}
	wantSample(t, scrape(t, b.handler), "chronos_agent_store_writable", 0)

	if err := os.Remove(runs); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, runs); err != nil {
		t.Fatal(err)
	}
	b.setNow(now.Add(4 * time.Second))
	if code, checks := readyz(t, b.handler); code != http.StatusOK || checks["store"] != "ok" {
		t.Fatalf("readyz %d %v after the store came back", code, checks)
	}
	wantSample(t, scrape(t, b.handler), "chronos_agent_store_writable", 1)
	if left, _ := filepath.Glob(filepath.Join(runs, ".chronos-probe-*")); len(left) != 0 {
		t.Fatalf("probe files left behind: %v", left)
	}
}

// fakeSync is a reconciler's state, set by the test.
type fakeSync struct {
	in       atomic.Bool
	failures atomic.Int64
}

func (f *fakeSync) InSync() bool    { return f.in.Load() }
func (f *fakeSync) Failures() int64 { return f.failures.Load() }

// /readyz fails once the agent has been out of sync with NAS for longer
// than the resync interval, and recovers when it is in sync; the in-sync
// gauge and the reconcile error counter read the reconciler.
func TestReadyzFailsWhenOutOfSyncTooLong(t *testing.T) {
	t.Parallel()
	var clock atomic.Pointer[time.Time]
	at := func(d time.Duration) { t := now.Add(d); clock.Store(&t) }
	at(0)
	rec := &fakeSync{}
	rec.failures.Store(3)
	s := agenthttp.New(agenthttp.Config{Firer: fakeFirer{}, Logger: quiet, Sync: rec, ResyncInterval: 5 * time.Minute,
		Now: func() time.Time { return *clock.Load() }})
	h := apitest.New(t, s)

	steps := []struct {
		at     time.Duration
		in     bool
		status int
	}{
		{0, false, http.StatusOK},               // out of sync since the start
		{4 * time.Minute, false, http.StatusOK}, // within the interval
		{5*time.Minute + time.Second, false, http.StatusServiceUnavailable},
		{6 * time.Minute, true, http.StatusOK},  // in sync again
		{7 * time.Minute, false, http.StatusOK}, // out again: the clock restarts
		{11 * time.Minute, false, http.StatusOK},
		{12*time.Minute + time.Second, false, http.StatusServiceUnavailable},
	}
	for _, st := range steps {
		at(st.at)
		rec.in.Store(st.in)
		code, checks := readyz(t, h)
		if code != st.status {
			t.Fatalf("at %s (in sync %v): readyz %d %v, want %d", st.at, st.in, code, checks, st.status)
		}
		if code == http.StatusServiceUnavailable && !strings.Contains(checks["sync"], "out of sync with NAS") {
			t.Fatalf("at %s: checks %v do not name the sync", st.at, checks)
		}
		page := scrape(t, h)
		wantSample(t, page, "chronos_agent_in_sync", map[bool]float64{true: 1, false: 0}[st.in])
		wantSample(t, page, "chronos_agent_reconcile_errors_total", 3)
	}
	// Every request is an observation: one made while in sync restarts the
	// clock even when no probe saw it.
	at(20 * time.Minute)
	rec.in.Store(true)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, contract.PathHealthz, nil))
	rec.in.Store(false)
	at(24 * time.Minute)
	if code, checks := readyz(t, h); code != http.StatusOK {
		t.Fatalf("readyz %d %v after a request saw the agent in sync", code, checks)
	}
}

var _ agenthttp.Firer = (*agent.Runtime)(nil)
