package nashttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/pgtest"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	relaypostgres "github.com/chronoscron/chronos/relay/postgres"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// dashboardClient talks to a NAS internal listener over loopback, as the
// dashboard's page does: every call comes from the listener's own origin.
type dashboardClient struct {
	t   *testing.T
	url string
}

// serveInternal serves b's internal handler (checked against the API
// description) on a loopback listener.
func serveInternal(t *testing.T, b *bundle) *dashboardClient {
	srv := httptest.NewServer(b.internal)
	t.Cleanup(srv.Close)
	return &dashboardClient{t: t, url: srv.URL}
}

// call sends method path with the session cookie value (when not empty)
// and a JSON body (when not nil).
func (d *dashboardClient) call(method, path, cookie string, body any) *http.Response {
	d.t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			d.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, d.url+path, r)
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Origin", d.url)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: nashttp.OperatorCookie, Value: cookie})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// login posts token and returns the answer and the session cookie's value.
func (d *dashboardClient) login(token string) (*http.Response, string) {
	d.t.Helper()
	resp := d.call(http.MethodPost, contract.PathOperatorSession, "", contract.OperatorSessionRequest{Token: token})
	for _, c := range resp.Cookies() {
		if c.Name == nashttp.OperatorCookie {
			return resp, c.Value
		}
	}
	return resp, ""
}

// status is the status of an operator route read with cookie.
func (d *dashboardClient) status(cookie string) int {
	d.t.Helper()
	return d.call(http.MethodGet, contract.PathOperatorOverview, cookie, nil).StatusCode
}

// errorOf decodes an error body.
func errorOf(t *testing.T, resp *http.Response) contract.Error {
	t.Helper()
	var e contract.Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("%d: not an error body: %v", resp.StatusCode, err)
	}
	return e
}

// TestOperatorLogoutEndsSession: a session cookie replayed after its
// logout is refused 401 unauthenticated, by the NAS that logged it out and,
// on a shared Redis or PostgreSQL store, by another NAS process too; the logout ends that
// session only; a logout without a live session (none, forged) answers 200
// and ends nothing.
func TestOperatorLogoutEndsSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		redis    bool
		postgres bool
	}{
		{name: "embedded store"},
		{name: "two NAS on one Redis", redis: true},
		{name: "two NAS on one PostgreSQL", postgres: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var a, b *dashboardClient
			if tc.redis {
				srv := redistest.Start(t, redistest.Options{})
				open := func() *dashboardClient {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					eng, err := relayredis.Open(ctx, srv.URL(), relayredis.Options{Prefix: "nas"})
					if err != nil {
						t.Fatalf("open the store: %v", err)
					}
					t.Cleanup(func() { _ = eng.Close() })
					return serveInternal(t, setup(t, func(_ *nas.Config, o *nas.Options) { o.Engine = eng }))
				}
				a, b = open(), open()
			} else if tc.postgres {
				srv := pgtest.Start(t)
				open := func() *dashboardClient {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					eng, err := relaypostgres.Open(ctx, srv.URL(), relaypostgres.Options{Migrate: true})
					if err != nil {
						t.Fatalf("open the store: %v", err)
					}
					t.Cleanup(func() { _ = eng.Close() })
					return serveInternal(t, setup(t, func(_ *nas.Config, o *nas.Options) { o.Engine = eng }))
				}
				a, b = open(), open()
			} else {
				a = serveInternal(t, setup(t))
				b = a
			}

			resp, mine := a.login(opToken)
			if resp.StatusCode != http.StatusOK || mine == "" {
				t.Fatalf("login: %d, cookie %q", resp.StatusCode, mine)
			}
			_, other := b.login(opToken)
			for _, d := range []*dashboardClient{a, b} {
				if st := d.status(mine); st != http.StatusOK {
					t.Fatalf("the session before its logout: %d", st)
				}
			}

			// No cookie, or a forged one: 200, and nothing ends.
			forged := "v2.AAAAAAAAAAAAAAAAAAAAAA.99999999999.AAAA"
			for _, ck := range []string{"", forged, "garbage"} {
				if resp := a.call(http.MethodDelete, contract.PathOperatorSession, ck, nil); resp.StatusCode != http.StatusOK {
					t.Fatalf("logout with cookie %q: %d", ck, resp.StatusCode)
				}
			}
			if st := b.status(mine); st != http.StatusOK {
				t.Fatalf("a logout without a live session ended one: %d", st)
			}

			resp = a.call(http.MethodDelete, contract.PathOperatorSession, mine, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("logout: %d", resp.StatusCode)
			}
			if cs := resp.Cookies(); len(cs) != 1 || cs[0].Name != nashttp.OperatorCookie || cs[0].MaxAge >= 0 {
				t.Fatalf("logout cookies %v, want %s cleared", cs, nashttp.OperatorCookie)
			}
			for name, d := range map[string]*dashboardClient{"the NAS that logged it out": a, "the other NAS": b} {
				resp := d.call(http.MethodGet, contract.PathOperatorOverview, mine, nil)
				if e := errorOf(t, resp); resp.StatusCode != http.StatusUnauthorized || e.Code != contract.CodeUnauthenticated {
					t.Errorf("%s: the replayed cookie: %d %s, want 401 %s", name, resp.StatusCode, e.Code, contract.CodeUnauthenticated)
				}
				if resp := d.call(http.MethodPost, contract.PathOperatorDLQReplay, mine, contract.DLQReplayRequest{ScheduleIDs: []string{"sch-x"}}); resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("%s: a replay with the replayed cookie: %d, want 401", name, resp.StatusCode)
				}
			}
			// Logging out again is harmless; the other session lives on.
			if resp := b.call(http.MethodDelete, contract.PathOperatorSession, mine, nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("second logout: %d", resp.StatusCode)
			}
			for _, d := range []*dashboardClient{a, b} {
				if st := d.status(other); st != http.StatusOK {
					t.Fatalf("another session after the logout: %d", st)
				}
			}
		})
	}
}

// TestOperatorLogoutStoreDown: when the store does not answer, a logout is
// 503 store_unavailable with Retry-After and leaves the cookie set, and a
// cookie cannot be checked either: the operator routes answer 503, never
// 200. Once the store answers, the repeated logout ends the session.
func TestOperatorLogoutStoreDown(t *testing.T) {
	t.Parallel()
	b, srv, _ := redisSetup(t, relayredis.Options{RetryFor: -1})
	d := serveInternal(t, b)
	_, ck := d.login(opToken)
	if ck == "" {
		t.Fatal("no session")
	}
	if err := srv.Pause(); err != nil {
		t.Fatalf("pause: %v", err)
	}
	resp := d.call(http.MethodDelete, contract.PathOperatorSession, ck, nil)
	e := errorOf(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != contract.CodeStoreUnavailable || resp.Header.Get(contract.HeaderRetryAfter) == "" || len(resp.Cookies()) != 0 {
		t.Fatalf("logout with the store down: %d %s, Retry-After %q, cookies %v", resp.StatusCode, e.Code, resp.Header.Get(contract.HeaderRetryAfter), resp.Cookies())
	}
	if st := d.status(ck); st != http.StatusServiceUnavailable {
		t.Fatalf("a cookie checked with the store down: %d, want 503", st)
	}
	if err := srv.Resume(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if resp := d.call(http.MethodDelete, contract.PathOperatorSession, ck, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the repeated logout: %d", resp.StatusCode)
	}
	if st := d.status(ck); st != http.StatusUnauthorized {
		t.Fatalf("the session after the repeated logout: %d, want 401", st)
	}
}

// logLines returns the JSON log records in logs whose msg starts with
// prefix.
func logLines(t *testing.T, logs *syncBuffer, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if l == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, rec)
		}
	}
	return out
}

// testClock is a clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestOperatorLoginThrottle: a burst of 300 wrong tokens from one address
// gets exactly the failure budget of 401s and 429 rate_limited with
// Retry-After for the rest; the right token during the lockout is 429 too;
// another address is not locked out; after Retry-After the right token logs
// in and starts the address afresh; each further lockout doubles; the
// refusals are logged in a couple of aggregate lines, not one per attempt.
func TestOperatorLoginThrottle(t *testing.T) {
	t.Parallel()
	clock := &testClock{now: time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)}
	logs := &syncBuffer{}
	b := setup(t, func(_ *nas.Config, o *nas.Options) {
		o.Now = clock.Now
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	d := serveInternal(t, b)

	const burst = 300
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		waits    = map[string]int{}
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 16)
	)
	for range burst {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, ck := d.login("guess")
			e := errorOf(t, resp)
			mu.Lock()
			defer mu.Unlock()
			statuses[resp.StatusCode]++
			if resp.StatusCode == http.StatusTooManyRequests {
				waits[resp.Header.Get(contract.HeaderRetryAfter)]++
				if e.Code != contract.CodeRateLimited {
					t.Errorf("429 with error %q", e.Code)
				}
			}
			if ck != "" {
				t.Error("a wrong token got a session")
			}
		})
	}
	wg.Wait()
	if statuses[http.StatusUnauthorized] != nas.LoginFailureBudget || statuses[http.StatusTooManyRequests] != burst-nas.LoginFailureBudget || len(statuses) != 2 {
		t.Fatalf("statuses %v, want %d×401 then %d×429", statuses, nas.LoginFailureBudget, burst-nas.LoginFailureBudget)
	}
	if waits["1"] != burst-nas.LoginFailureBudget {
		t.Fatalf("Retry-After %v, want 1 s on every 429", waits)
	}
	if n := len(logLines(t, logs, "operator log")); n != 1 {
		t.Fatalf("%d log lines about the burst so far, want 1 (the first failure; the rest aggregated)", n)
	}

	// The right token during the lockout is refused without being compared.
	resp, ck := d.login(opToken)
	if resp.StatusCode != http.StatusTooManyRequests || ck != "" || resp.Header.Get(contract.HeaderRetryAfter) != "1" {
		t.Fatalf("the right token while locked out: %d, cookie %q, Retry-After %q", resp.StatusCode, ck, resp.Header.Get(contract.HeaderRetryAfter))
	}
	// Another address is not locked out: its wrong token is a plain 401.
	rec := b.do(b.internal, request{method: http.MethodPost, path: contract.PathOperatorSession, body: contract.OperatorSessionRequest{Token: "guess"}, header: sameOriginHeader,
		remote: "127.0.0.2:40000"})
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("another address: %d %s, want 401", rec.Code, rec.Body)
	}

	// After Retry-After the right token logs in.
	clock.Add(time.Second)
	resp, ck = d.login(opToken)
	if resp.StatusCode != http.StatusOK || ck == "" {
		t.Fatalf("the right token after Retry-After: %d", resp.StatusCode)
	}
	if st := d.status(ck); st != http.StatusOK {
		t.Fatalf("the session after the lockout: %d", st)
	}

	// The login started the address afresh: the full budget again, then
	// lockouts of 1, 2 and 4 s.
	for i := range nas.LoginFailureBudget {
		if resp, _ := d.login("guess"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d after a login: %d, want 401", i+1, resp.StatusCode)
		}
	}
	for _, lock := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		want := strconv.Itoa(int(lock.Seconds()))
		for range 2 { // no time passes: locked out both times
			resp, _ := d.login("guess")
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(contract.HeaderRetryAfter) != want {
				t.Fatalf("locked out: %d Retry-After %q, want 429 %s", resp.StatusCode, resp.Header.Get(contract.HeaderRetryAfter), want)
			}
		}
		clock.Add(lock)
		if resp, _ := d.login("guess"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong token after the %s lockout: %d, want 401", lock, resp.StatusCode)
		}
	}

	// Every refusal of the loopback address is in the aggregate lines: the
	// burst's first, the one the login wrote with the rest of the burst,
	// the first failure after the login, and (a minute on) one with the
	// failures since.
	clock.Add(nas.LoginLogInterval)
	if resp, _ := d.login("guess"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after the interval: %d", resp.StatusCode)
	}
	var wrong, throttled float64
	var lines int
	for _, l := range logLines(t, logs, "operator log") {
		if l["client"] != "127.0.0.1" {
			continue
		}
		lines++
		if l["level"] != "WARN" {
			t.Errorf("log line %v is not WARN", l)
		}
		wrong += l["wrong_tokens"].(float64)
		throttled += l["throttled"].(float64)
	}
	// Wrong tokens: the burst's 5; after the login 5, 3 after lockouts and
	// the last. Throttled: the burst's 295, the right token, 2 per lockout.
	wantWrong, wantThrottled := nas.LoginFailureBudget*2+3+1, burst-nas.LoginFailureBudget+1+6
	if int(wrong) != wantWrong || int(throttled) != wantThrottled || lines != 4 {
		t.Fatalf("%d lines counting %v wrong tokens and %v throttled; want 4 lines, %d and %d", lines, wrong, throttled, wantWrong, wantThrottled)
	}
}
