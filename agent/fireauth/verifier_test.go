package fireauth_test

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

const (
	issuer   = "https://nas.example"
	audience = "agent:inst-1"
)

var quiet = slog.New(slog.DiscardHandler)

var now = time.Date(2026, 6, 18, 12, 34, 56, 0, time.UTC)

func fireAt(t time.Time) contract.FireRequest {
	return contract.FireRequest{JobID: "ab12cd34", FireAt: contract.NewTime(t), ScheduleID: "sch_1", Attempt: 1}
}

func newFire() fireauthtest.Fire {
	return fireauthtest.NewFire(issuer, audience, now, fireAt(now))
}

func mustKey(t testing.TB, alg, kid string) *fireauthtest.Key {
	t.Helper()
	k, err := fireauthtest.NewKey(alg, kid)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func staticVerifier(t testing.TB, keys ...*fireauthtest.Key) *fireauth.JWTVerifier {
	t.Helper()
	jwks, err := fireauthtest.JWKS(keys...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := fireauth.NewStatic(jwks, fireauth.Config{Issuer: issuer, Audience: audience, Now: func() time.Time { return now }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantStatus(t *testing.T, err error, status int) *contract.Error {
	t.Helper()
	var ce *contract.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *contract.Error", err)
	}
	if ce.HTTPStatus() != status {
		t.Fatalf("status %d (%v), want %d", ce.HTTPStatus(), ce, status)
	}
	return ce
}

func TestVerifyFireAccepts(t *testing.T) {
	t.Parallel()
	keys := map[string]*fireauthtest.Key{
		"EdDSA": mustKey(t, "EdDSA", "k-ed"),
		"ES256": mustKey(t, "ES256", "k-es"),
		"RS256": mustKey(t, "RS256", "k-rs"),
	}
	v := staticVerifier(t, keys["EdDSA"], keys["ES256"], keys["RS256"])
	unix := func(d time.Duration) int64 { return now.Add(d).Unix() }
	tests := []struct {
		name string
		alg  string
		edit func(*fireauthtest.Token)
	}{
		{name: "EdDSA", alg: "EdDSA"},
		{name: "ES256", alg: "ES256"},
		{name: "RS256", alg: "RS256"},
		{name: "expired within the leeway", alg: "EdDSA", edit: func(tk *fireauthtest.Token) {
			tk.Claims["iat"], tk.Claims["nbf"], tk.Claims["exp"] = unix(-80*time.Second), unix(-80*time.Second), unix(-20*time.Second)
		}},
		{name: "nbf within the leeway", alg: "EdDSA", edit: func(tk *fireauthtest.Token) {
			tk.Claims["nbf"] = unix(20 * time.Second)
		}},
		{name: "nbf absent", alg: "EdDSA", edit: func(tk *fireauthtest.Token) { delete(tk.Claims, "nbf") }},
		{name: "lifetime exactly 120s", alg: "EdDSA", edit: func(tk *fireauthtest.Token) { tk.Claims["exp"] = unix(120 * time.Second) }},
		{name: "fire_at written with another offset", alg: "ES256", edit: func(tk *fireauthtest.Token) {
			tk.Claims["fire_at"] = now.In(time.FixedZone("", 2*3600)).Format(time.RFC3339)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFire()
			tk := fireauthtest.NewToken(keys[tt.alg], f)
			if tt.edit != nil {
				tt.edit(tk)
			}
			token, err := tk.Sign()
			if err != nil {
				t.Fatal(err)
			}
			if err := v.VerifyFire(context.Background(), token, f.Body, f.Request); err != nil {
				t.Fatalf("VerifyFire: %v", err)
			}
		})
	}
}

func TestVerifyFireRejects(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"EdDSA", "ES256", "RS256"} {
		key := mustKey(t, alg, "k1")
		v := staticVerifier(t, key)
		for _, c := range fireauthtest.Rejections {
			t.Run(alg+"/"+c.Name, func(t *testing.T) {
				t.Parallel()
				f := newFire()
				token, body, err := c.Build(key, f)
				if err != nil {
					t.Fatal(err)
				}
				ce := wantStatus(t, v.VerifyFire(context.Background(), token, body, f.Request), http.StatusUnauthorized)
				if ce.Code != contract.CodeInvalidToken {
					t.Fatalf("code %q, want %q", ce.Code, contract.CodeInvalidToken)
				}
				if !strings.Contains(ce.Description, c.Reason) {
					t.Fatalf("description %q does not name the cause %q", ce.Description, c.Reason)
				}
				if strings.Contains(ce.Description, audience) || strings.Contains(ce.Description, issuer) {
					t.Fatalf("description %q echoes an expected value", ce.Description)
				}
			})
		}
	}
}

func TestConfigRefusesSymmetricMethods(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  fireauth.Config
	}{
		{"HS256", fireauth.Config{Issuer: issuer, Audience: audience, Methods: []string{"HS256"}}},
		{"none", fireauth.Config{Issuer: issuer, Audience: audience, Methods: []string{"none"}}},
		{"no issuer", fireauth.Config{Audience: audience}},
		{"no audience", fireauth.Config{Issuer: issuer}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := fireauth.NewStatic([]byte(`{"keys":[]}`), tt.cfg); err == nil {
				t.Fatal("NewStatic accepted the config")
			}
		})
	}
}

// jwksServer serves a key set that tests can swap and break, counting fetches.
type jwksServer struct {
	*httptest.Server
	fetches atomic.Int64
	// waiting counts requests held by hold.
	waiting atomic.Int64
	mu      sync.Mutex
	body    []byte
	status  int
	gate    chan struct{}
}

func newJWKSServer(t *testing.T, keys ...*fireauthtest.Key) *jwksServer {
	t.Helper()
	s := &jwksServer{status: http.StatusOK}
	s.set(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		status, body, gate := s.status, s.body, s.gate
		s.mu.Unlock()
		if gate != nil {
			s.waiting.Add(1)
			<-gate
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(t *testing.T, keys ...*fireauthtest.Key) {
	t.Helper()
	b, err := fireauthtest.JWKS(keys...)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.body, s.status = b, http.StatusOK
	s.mu.Unlock()
}

// hold makes requests wait until the returned release is called.
func (s *jwksServer) hold() (release func()) {
	gate := make(chan struct{})
	s.mu.Lock()
	s.gate = gate
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.gate = nil
		s.mu.Unlock()
		close(gate)
	}
}

func (s *jwksServer) fail(status int) {
	s.mu.Lock()
	s.status = status
	s.mu.Unlock()
}

// clock is a fake clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// remoteConfig is a verifier config for the key set at url on clk (a clock
// standing at now when nil).
func remoteConfig(url string, clk *clock) fireauth.Config {
	if clk == nil {
		clk = newClock(now)
	}
	return fireauth.Config{
		JWKSURL: url, Issuer: issuer, Audience: audience,
		Now:            clk.Now,
		LoadBackoff:    5 * time.Millisecond,
		LoadBackoffMax: 20 * time.Millisecond,
		HTTPTimeout:    2 * time.Second,
		Logger:         quiet,
	}
}

func waitReady(t *testing.T, v *fireauth.JWTVerifier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// A key set that is down at start makes the verifier answer 503 (retry), not
// 401; the failed loads leave no debt: once the key set is back, a rotation
// to a new kid is picked up by the first token that names it.
func TestKeySetDownAtStart(t *testing.T) {
	t.Parallel()
	k1 := mustKey(t, "EdDSA", "k1")
	srv := newJWKSServer(t, k1)
	srv.fail(http.StatusBadGateway)
	clk := newClock(now)
	v, err := fireauth.New(context.Background(), remoteConfig(srv.URL, clk))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	f := newFire()
	token, err := fireauthtest.Mint(k1, f)
	if err != nil {
		t.Fatal(err)
	}
	ce := wantStatus(t, v.VerifyFire(context.Background(), token, f.Body, f.Request), http.StatusServiceUnavailable)
	if ce.RetryAfter <= 0 {
		t.Fatal("503 without a retry delay")
	}
	if v.Ready() {
		t.Fatal("ready while the key set is down")
	}
	// Let a few loads fail, then recover.
	for srv.fetches.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	if h := v.Health(context.Background()); h.Loaded || h.Failures == 0 || h.LastError == "" || h.Fetches[fireauth.TriggerLoad].Failed == 0 {
		t.Fatalf("health while down: %+v", h)
	}
	srv.set(t, k1)
	waitReady(t, v)
	if err := v.VerifyFire(context.Background(), token, f.Body, f.Request); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if h := v.Health(context.Background()); !h.FetchedAt.Equal(now) || !h.LoadedAt.Equal(now) {
		t.Fatalf("health after the load: %+v", h)
	}
	// A rotation to a new kid is picked up at once, by one fetch.
	k2 := mustKey(t, "EdDSA", "k2")
	srv.set(t, k1, k2)
	token2, err := fireauthtest.Mint(k2, f)
	if err != nil {
		t.Fatal(err)
	}
	before := srv.fetches.Load()
	if err := v.VerifyFire(context.Background(), token2, f.Body, f.Request); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	if got := srv.fetches.Load() - before; got != 1 {
		t.Fatalf("the rotation took %d fetches, want 1", got)
	}
	h := v.Health(context.Background())
	if !h.Loaded || h.Keys != 2 || h.Fetches[fireauth.TriggerUnknownKID].OK != 1 || !h.FetchedAt.Equal(clk.Now()) {
		t.Fatalf("health after rotation: %+v", h)
	}
}

// garbage returns a fire token that passes every check needing no key
// (claims, headers, body binding) but is signed by a key NAS never
// published, under a random kid: what anyone who can reach the fire route
// can make.
func garbage(t *testing.T, f fireauthtest.Fire) string {
	t.Helper()
	stranger := mustKey(t, "EdDSA", "kid-"+rand.Text())
	token, err := fireauthtest.Mint(stranger, f)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// TestUnknownKIDFloodCannotStarveRotation: a flood of tokens under made-up
// kids costs NAS one key set fetch per interval, all of them answered 503
// with Retry-After (never 401). A real fire signed with a key NAS activated
// right after the flood is answered 503 too, with a Retry-After no longer
// than the interval, and verifies as soon as that delay has passed.
func TestUnknownKIDFloodCannotStarveRotation(t *testing.T) {
	t.Parallel()
	const interval = 30 * time.Second
	k1 := mustKey(t, "EdDSA", "k1")
	srv := newJWKSServer(t, k1)
	clk := newClock(now)
	cfg := remoteConfig(srv.URL, clk)
	cfg.UnknownKIDInterval = interval
	v, err := fireauth.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	waitReady(t, v)
	loaded := srv.fetches.Load()

	f := newFire()
	tokens := make([]string, 200)
	for i := range tokens {
		tokens[i] = garbage(t, f)
	}
	var wg sync.WaitGroup
	answers := make([]error, len(tokens))
	for i, tok := range tokens {
		wg.Go(func() { answers[i] = v.VerifyFire(context.Background(), tok, f.Body, f.Request) })
	}
	wg.Wait()
	for i, err := range answers {
		ce := wantStatus(t, err, http.StatusServiceUnavailable)
		if ce.Code != contract.CodeUnavailable || ce.RetryAfter <= 0 || ce.RetryAfter > interval {
			t.Fatalf("garbage token %d: %+v, retry after %s", i, ce, ce.RetryAfter)
		}
	}
	if got := srv.fetches.Load() - loaded; got != 1 {
		t.Fatalf("the flood caused %d key set fetches, want 1", got)
	}
	// Tokens that fail a check needing no key are refused whatever their
	// kid, and fetch nothing.
	bad := fireauthtest.NewToken(mustKey(t, "EdDSA", "kid-"+rand.Text()), f)
	bad.Claims["aud"] = "agent:someone-else"
	badToken, err := bad.Sign()
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		wantStatus(t, v.VerifyFire(context.Background(), badToken, f.Body, f.Request), http.StatusUnauthorized)
	}

	// NAS activates a new key right after the flood and signs a real fire.
	k2 := mustKey(t, "EdDSA", "k2")
	srv.set(t, k1, k2)
	clk.Advance(time.Second)
	real := fireauthtest.NewFire(issuer, audience, clk.Now(), fireAt(now))
	token, err := fireauthtest.Mint(k2, real)
	if err != nil {
		t.Fatal(err)
	}
	ce := wantStatus(t, v.VerifyFire(context.Background(), token, real.Body, real.Request), http.StatusServiceUnavailable)
	if ce.RetryAfter <= 0 || ce.RetryAfter > interval-time.Second {
		t.Fatalf("the real fire's 503 asks to retry after %s; want within the %s left of the interval", ce.RetryAfter, interval-time.Second)
	}
	if got := srv.fetches.Load() - loaded; got != 1 {
		t.Fatalf("%d fetches before the retry, want still 1", got)
	}
	// More garbage meanwhile changes nothing.
	for range 20 {
		wantStatus(t, v.VerifyFire(context.Background(), garbage(t, f), f.Body, f.Request), http.StatusServiceUnavailable)
	}
	clk.Advance(ce.RetryAfter)
	if err := v.VerifyFire(context.Background(), token, real.Body, real.Request); err != nil {
		t.Fatalf("the real fire after its Retry-After: %v", err)
	}
	if got := srv.fetches.Load() - loaded; got != 2 {
		t.Fatalf("%d fetches in all, want 2", got)
	}
	// Garbage after the rotation is still a 503, and fetches nothing more
	// within the interval.
	wantStatus(t, v.VerifyFire(context.Background(), garbage(t, f), f.Body, f.Request), http.StatusServiceUnavailable)
	if got := srv.fetches.Load() - loaded; got != 2 {
		t.Fatalf("%d fetches in all, want 2", got)
	}
	if h := v.Health(context.Background()); h.Keys != 2 || h.Fetches[fireauth.TriggerUnknownKID].OK != 2 {
		t.Fatalf("health: %+v", h)
	}
}

// Tokens naming an unknown kid while a fetch is running wait for that fetch
// and share it: a slow key set costs one fetch however many fires wait.
func TestUnknownKIDsShareOneFetch(t *testing.T) {
	t.Parallel()
	k1, k2 := mustKey(t, "EdDSA", "k1"), mustKey(t, "EdDSA", "k2")
	srv := newJWKSServer(t, k1)
	clk := newClock(now)
	v, err := fireauth.New(context.Background(), remoteConfig(srv.URL, clk))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	waitReady(t, v)

	srv.set(t, k1, k2)
	release := srv.hold()
	f := newFire()
	token, err := fireauthtest.Mint(k2, f)
	if err != nil {
		t.Fatal(err)
	}
	loaded := srv.fetches.Load()
	var wg sync.WaitGroup
	answers := make([]error, 20)
	for i := range answers {
		wg.Go(func() { answers[i] = v.VerifyFire(context.Background(), token, f.Body, f.Request) })
	}
	// The first caller's fetch is held at the key set while the others
	// arrive: they join it, or find the key it brought.
	for srv.waiting.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for i, err := range answers {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if got := srv.fetches.Load() - loaded; got != 1 {
		t.Fatalf("%d fetches for %d waiting fires, want 1", got, len(answers))
	}
}

// The key set is fetched again every RefreshInterval, so a key NAS publishes
// ahead of a rotation is known before any token names it.
func TestKeySetRefreshesPeriodically(t *testing.T) {
	t.Parallel()
	k1, k2 := mustKey(t, "EdDSA", "k1"), mustKey(t, "EdDSA", "k2")
	srv := newJWKSServer(t, k1)
	cfg := remoteConfig(srv.URL, nil)
	cfg.RefreshInterval = 10 * time.Millisecond
	v, err := fireauth.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	waitReady(t, v)
	srv.set(t, k1, k2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for v.Health(ctx).Keys != 2 {
		if ctx.Err() != nil {
			t.Fatal("the published key never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	if h := v.Health(ctx); h.Fetches[fireauth.TriggerPeriodic].OK == 0 || h.Fetches[fireauth.TriggerUnknownKID] != (fireauth.FetchCount{}) {
		t.Fatalf("fetches: %+v", h.Fetches)
	}
	// A set without a usable key is an error and keeps the keys in use.
	srv.mu.Lock()
	srv.body = []byte(`{"keys":[]}`)
	srv.mu.Unlock()
	failures := v.Health(ctx).Failures
	for v.Health(ctx).Failures == failures {
		if ctx.Err() != nil {
			t.Fatal("the empty key set was not reported")
		}
		time.Sleep(time.Millisecond)
	}
	if h := v.Health(ctx); h.Keys != 2 || !strings.Contains(h.LastError, "no usable key") {
		t.Fatalf("health after an empty key set: %+v", h)
	}
}

func TestKeySetFetchIsCapped(t *testing.T) {
	t.Parallel()
	big := `{"keys":[],"pad":"` + strings.Repeat("x", 64<<10) + `"}`
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"announced length", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(big)) }},
		{"chunked", func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i < len(big); i += 1024 {
				_, _ = w.Write([]byte(big[i:min(i+1024, len(big))]))
				w.(http.Flusher).Flush()
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var fetches atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fetches.Add(1)
				tt.handler(w, r)
			}))
			defer srv.Close()
			cfg := remoteConfig(srv.URL, nil)
			cfg.MaxJWKSBytes = 4 << 10
			v, err := fireauth.New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for fetches.Load() < 2 {
				time.Sleep(time.Millisecond)
			}
			v.Close()
			h := v.Health(context.Background())
			if h.Loaded || !strings.Contains(h.LastError, "exceeds the limit") {
				t.Fatalf("health: %+v", h)
			}
		})
	}
}

func TestKeySetFetchTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	cfg := remoteConfig(srv.URL, nil)
	cfg.HTTPTimeout = 50 * time.Millisecond
	v, err := fireauth.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for v.Health(ctx).Failures < 2 {
		if ctx.Err() != nil {
			t.Fatal("no timed-out fetch recorded")
		}
		time.Sleep(time.Millisecond)
	}
	if v.Ready() {
		t.Fatal("ready without keys")
	}
}

// An unknown kid while the key set cannot be fetched is a 503 (retry), not a
// 401 that would dead-letter a good fire; once NAS is back, the key is found
// by the retry the Retry-After asked for.
func TestUnknownKIDWhileKeySetIsDown(t *testing.T) {
	t.Parallel()
	k1 := mustKey(t, "EdDSA", "k1")
	srv := newJWKSServer(t, k1)
	clk := newClock(now)
	v, err := fireauth.New(context.Background(), remoteConfig(srv.URL, clk))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	waitReady(t, v)

	k2 := mustKey(t, "EdDSA", "k2")
	f := newFire()
	token, err := fireauthtest.Mint(k2, f)
	if err != nil {
		t.Fatal(err)
	}
	srv.fail(http.StatusBadGateway)
	ce := wantStatus(t, v.VerifyFire(context.Background(), token, f.Body, f.Request), http.StatusServiceUnavailable)
	if ce.RetryAfter != fireauth.DefaultUnknownKIDInterval || !strings.Contains(ce.Description, "cannot fetch") {
		t.Fatalf("503 %q, retry after %s; want the interval %s", ce.Description, ce.RetryAfter, fireauth.DefaultUnknownKIDInterval)
	}
	// Known keys still verify meanwhile.
	good, err := fireauthtest.Mint(k1, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.VerifyFire(context.Background(), good, f.Body, f.Request); err != nil {
		t.Fatalf("known key while the key set is down: %v", err)
	}
	srv.set(t, k1, k2)
	clk.Advance(ce.RetryAfter)
	if err := v.VerifyFire(context.Background(), token, f.Body, f.Request); err != nil {
		t.Fatalf("rotated key after recovery: %v", err)
	}
}
