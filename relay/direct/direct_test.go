package direct_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
	"github.com/chronoscron/chronos/relay/direct"
)

const issuer = "https://nas.example"

// newSealer returns a Sealer under a fresh encryption key.
func newSealer(t *testing.T) *cronkey.Sealer {
	t.Helper()
	text, err := cronkey.GenerateEncryptionKey()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cronkey.ParseEncryptionKey(text)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cronkey.NewSealer(raw)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// agent is an httptest agent that verifies each direct fire token with the
// job's key, as an agent does, then answers with its answer function.
type agent struct {
	t      *testing.T
	key    cronkey.Key
	srv    *httptest.Server
	calls  atomic.Int32
	mu     sync.Mutex
	tokens []string
	// answer writes the answer to a fire whose token verified; nil: 202
	// accepted.
	answer func(w http.ResponseWriter)
}

func newAgent(t *testing.T, key cronkey.Key) *agent {
	a := &agent{t: t, key: key}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agent) serve(w http.ResponseWriter, r *http.Request) {
	a.calls.Add(1)
	body, _ := io.ReadAll(r.Body)
	token, _ := strings.CutPrefix(r.Header.Get(contract.HeaderAuthorization), contract.BearerPrefix)
	a.mu.Lock()
	a.tokens = append(a.tokens, token)
	a.mu.Unlock()
	if r.URL.Path != contract.PathFire {
		http.Error(w, `{"error":"not_found"}`, http.StatusNotFound)
		return
	}
	if err := a.verify(token, body); err != nil {
		a.t.Logf("agent refused the token: %v", err)
		w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_token"}`))
		return
	}
	if a.answer != nil {
		a.answer(w)
		return
	}
	w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"status":"accepted","run_id":"r-1"}`))
}

// verify checks a direct token as the agent does: HS256 under the job's
// key, its kid and typ, and every claim against the body.
func (a *agent) verify(token string, body []byte) error {
	var fire contract.FireRequest
	if err := json.Unmarshal(body, &fire); err != nil {
		return err
	}
	var c contract.FireClaims
	_, err := jwt.ParseWithClaims(token, &c, func(tk *jwt.Token) (any, error) {
		if tk.Header["kid"] != a.key.ID || tk.Header["typ"] != contract.TokenTypeCronFire {
			return nil, errBadHeader
		}
		return a.key.Secret, nil
	}, jwt.WithValidMethods([]string{contract.DirectTokenAlg}), jwt.WithIssuer(issuer), jwt.WithAudience(contract.Audience("inst-1")), jwt.WithExpirationRequired())
	if err != nil {
		return err
	}
	switch {
	case c.Purpose != contract.PurposeCronFire, c.JobID != fire.JobID, c.ScheduleID != fire.ScheduleID, c.Attempt != fire.Attempt,
		c.BodyHash != contract.BodyHash(body), c.FireAt != fire.FireAt.Text(), c.ID == "",
		c.ExpiresAt.Sub(c.IssuedAt.Time) != contract.DirectTokenLifetimeSeconds*time.Second, c.NotBefore.Time != c.IssuedAt.Time:
		return errBadClaims
	}
	return nil
}

var (
	errBadHeader = jwt.ErrTokenMalformed
	errBadClaims = jwt.ErrTokenInvalidClaims
)

// lease returns a freshly claimed lease of job-1 of agent-a, its key sealed
// for it by s, called back at callback.
func lease(t *testing.T, s *cronkey.Sealer, k cronkey.Key, callback string, attempt int) relay.Lease {
	t.Helper()
	sealed, err := s.Seal("agent-a", "job-1", k)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Second).Truncate(time.Second)
	return relay.Lease{
		OneShot: relay.OneShot{
			ScheduleID: "sch-1", AgentID: "agent-a", InstanceID: "inst-1", JobID: "job-1",
			FireAt: at, FireAtSpelling: at.In(time.FixedZone("", 2*3600)).Format(time.RFC3339),
			CallbackURL: callback, Attempt: attempt, State: relay.StateLeased,
			Direct: relay.DirectKey{Sealed: sealed, KeyID: k.ID, MintedAt: at},
		},
		Token: int64(attempt), ClaimedAt: time.Now(),
	}
}

// newDeliverer returns a Deliverer under s whose logs go to log.
func newDeliverer(t *testing.T, s *cronkey.Sealer, log *slog.Logger) *direct.Deliverer {
	t.Helper()
	d, err := direct.New(direct.Config{
		Sealer: s, Issuer: issuer, Logger: log,
		Caller: agentcall.NewCaller(agentcall.Policy{AllowPrivate: true}, 5*time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func answerWith(status int, retryAfter, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if retryAfter != "" {
			w.Header().Set(contract.HeaderRetryAfter, retryAfter)
		}
		w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

// TestDeliverAnswers: a direct fire signed with the job's key reaches the
// agent, and each answer maps to the outcome a mediated fire's does.
func TestDeliverAnswers(t *testing.T) {
	t.Parallel()
	s := newSealer(t)
	k, _ := cronkey.Mint()
	other, _ := cronkey.Mint()
	tests := []struct {
		name       string
		agentKey   cronkey.Key
		answer     func(http.ResponseWriter)
		attempt    int
		want       relay.Outcome
		wantRecord string // the last-fire record's outcome, "" for none
	}{
		{"accepted", k, nil, 1, relay.Outcome{Kind: relay.Done, Reason: "delivered: accepted"}, relay.LastFireDelivered},
		{"duplicate", k, answerWith(200, "", `{"status":"duplicate"}`), 2, relay.Outcome{Kind: relay.Done, Reason: "delivered: duplicate"}, relay.LastFireDelivered},
		{"gone", k, answerWith(200, "", `{"status":"gone"}`), 1, relay.Outcome{Kind: relay.Done, Reason: "delivered: gone"}, ""},
		{"waking 503 with Retry-After", k, answerWith(503, "7", `{"error":"waking"}`), 1,
			relay.Outcome{Kind: relay.Retry, RetryAfter: 7 * time.Second, ColdStart: true, AgentDown: true, Reason: "agent answered 503 waking"}, ""},
		{"too early 425", k, answerWith(425, "3", ``), 1,
			relay.Outcome{Kind: relay.Retry, RetryAfter: 3 * time.Second, ColdStart: true, AgentDown: true, Reason: "agent answered 425"}, ""},
		{"500 is up", k, answerWith(500, "", ``), 1, relay.Outcome{Kind: relay.Retry, Reason: "agent answered 500"}, ""},
		{"404 is final", k, answerWith(404, "", `{"error":"no_such_job"}`), 1, relay.Outcome{Kind: relay.Dead, Reason: "rejected by the agent: agent answered 404 no_such_job"}, ""},
		{"another key is refused, retried", other, nil, 1,
			relay.Outcome{Kind: relay.Retry, Reason: "agent answered 401 invalid_token (the fire token was refused; attempt 1 of at most 4)"}, ""},
		{"another key is refused, dead at the last auth attempt", other, nil, 4, relay.Outcome{Kind: relay.Dead}, ""},
		{"403", k, answerWith(403, "", `{"error":"forbidden"}`), 2,
			relay.Outcome{Kind: relay.Retry, Reason: "agent answered 403 forbidden (the fire token was refused; attempt 2 of at most 4)"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAgent(t, tc.agentKey)
			a.answer = tc.answer
			d := newDeliverer(t, s, slog.New(slog.DiscardHandler))
			l := lease(t, s, k, a.srv.URL, tc.attempt)
			got := d.Deliver(context.Background(), l)
			if a.calls.Load() != 1 {
				t.Fatalf("the agent was called %d times, want 1", a.calls.Load())
			}
			if got.Kind != tc.want.Kind || got.RetryAfter != tc.want.RetryAfter || got.ColdStart != tc.want.ColdStart || got.AgentDown != tc.want.AgentDown {
				t.Fatalf("outcome %+v, want %+v", got, tc.want)
			}
			if tc.want.Reason != "" && got.Reason != tc.want.Reason {
				t.Fatalf("reason %q, want %q", got.Reason, tc.want.Reason)
			}
			if tc.want.Kind == relay.Dead && tc.want.Reason == "" && !strings.Contains(got.Reason, "cron key") {
				t.Fatalf("reason %q does not point at the cron key", got.Reason)
			}
			switch {
			case tc.wantRecord == "" && got.Record != nil:
				t.Fatalf("record %+v, want none", got.Record)
			case tc.wantRecord != "" && (got.Record == nil || got.Record.Outcome != tc.wantRecord || got.Record.ScheduleID != "sch-1" || got.Record.InstanceID != "inst-1"):
				t.Fatalf("record %+v, want a %s record of the fire", got.Record, tc.wantRecord)
			}
		})
	}
}

// TestDeliverRefusedConnection: an agent that refuses the connection is
// down and waking, as for a mediated fire.
func TestDeliverRefusedConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	s := newSealer(t)
	k, _ := cronkey.Mint()
	got := newDeliverer(t, s, nil).Deliver(context.Background(), lease(t, s, k, "http://"+addr, 1))
	if got.Kind != relay.Retry || !got.AgentDown || !got.ColdStart || got.Reason != "connection refused" {
		t.Fatalf("outcome %+v, want a cold-start retry of an agent that is down", got)
	}
}

// TestDeliverWithoutAgent: fires that must not reach the agent do not: a
// stopped instance's (recorded as such), and with Rows, one whose job is gone
// or re-armed since its claim.
func TestDeliverWithoutAgent(t *testing.T) {
	t.Parallel()
	s := newSealer(t)
	k, _ := cronkey.Mint()
	a := newAgent(t, k)
	tests := []struct {
		name       string
		edit       func(*relay.Lease)
		rows       *rowsStub
		wantReason string
		wantRecord string
	}{
		{"stopped at the claim", func(l *relay.Lease) { l.InstanceStopped = true }, nil, "instance_stopped", relay.LastFireInstanceStopped},
		{"stopped since", func(l *relay.Lease) { l.ClaimedAt = time.Time{} }, &rowsStub{found: true, stopped: true}, "instance_stopped", relay.LastFireInstanceStopped},
		{"gone since", func(l *relay.Lease) { l.ClaimedAt = time.Now().Add(-time.Minute) }, &rowsStub{}, "dropped: job is no longer armed", ""},
		{"re-armed since", func(l *relay.Lease) { l.ClaimedAt = time.Time{} }, &rowsStub{found: true, scheduleID: "sch-2"}, "dropped: job was re-armed", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := lease(t, s, k, a.srv.URL, 1)
			tc.edit(&l)
			var rows direct.Rows
			if tc.rows != nil {
				r := *tc.rows
				r.row = l.OneShot
				if r.scheduleID != "" {
					r.row.ScheduleID = r.scheduleID
				}
				rows = r
			}
			d, err := direct.New(direct.Config{Sealer: s, Issuer: issuer, Caller: agentcall.NewCaller(agentcall.Policy{AllowPrivate: true}, time.Second), Rows: rows})
			if err != nil {
				t.Fatal(err)
			}
			got := d.Deliver(context.Background(), l)
			if got.Kind != relay.Done || got.Reason != tc.wantReason {
				t.Fatalf("outcome %+v, want done: %s", got, tc.wantReason)
			}
			if (tc.wantRecord == "") != (got.Record == nil) || got.Record != nil && got.Record.Outcome != tc.wantRecord {
				t.Fatalf("record %+v, want %q", got.Record, tc.wantRecord)
			}
		})
	}
	if n := a.calls.Load(); n != 0 {
		t.Fatalf("the agent was called %d times", n)
	}
}

// rowsStub answers Rows from its fields: found, under scheduleID ("": the
// lease's), with its instance stopped or not.
type rowsStub struct {
	found      bool
	scheduleID string
	stopped    bool
	row        relay.OneShot
}

func (r rowsStub) Get(context.Context, string, string) (relay.OneShot, error) {
	if !r.found {
		return relay.OneShot{}, relay.ErrNotFound
	}
	return r.row, nil
}

func (r rowsStub) InstanceStopped(context.Context, string) (bool, error) { return r.stopped, nil }

// TestDeliverKeyThatDoesNotOpen: a key sealed under another encryption key
// (or for another job) is dead-lettered at once, the agent not called, with
// a reason that names no key.
func TestDeliverKeyThatDoesNotOpen(t *testing.T) {
	t.Parallel()
	k, _ := cronkey.Mint()
	a := newAgent(t, k)
	nasSealer := newSealer(t)
	tests := []struct {
		name string
		edit func(*relay.Lease)
	}{
		{"another encryption key", func(*relay.Lease) {}},
		{"another job's key", func(l *relay.Lease) { l.JobID = "job-2" }},
		{"not sealed", func(l *relay.Lease) { l.Direct.Sealed = "v1.garbage" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := lease(t, nasSealer, k, a.srv.URL, 1)
			tc.edit(&l)
			relaySealer := nasSealer
			if tc.name == "another encryption key" {
				relaySealer = newSealer(t)
			}
			got := newDeliverer(t, relaySealer, nil).Deliver(context.Background(), l)
			if got.Kind != relay.Dead || !strings.Contains(got.Reason, "cron key does not open") {
				t.Fatalf("outcome %+v, want dead: the key does not open", got)
			}
			for _, secret := range secretForms(k, l.Direct.Sealed) {
				if strings.Contains(got.Reason, secret) {
					t.Fatalf("the reason shows the key: %q", got.Reason)
				}
			}
		})
	}
	if n := a.calls.Load(); n != 0 {
		t.Fatalf("the agent was called %d times", n)
	}
}

// TestDeliverWithoutEncryptionKey: a process without the encryption key
// retries a direct fire with a reason that says so, and logs it once.
func TestDeliverWithoutEncryptionKey(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := newSealer(t)
	k, _ := cronkey.Mint()
	a := newAgent(t, k)
	d := newDeliverer(t, nil, slog.New(slog.NewJSONHandler(&logs, nil)))
	for range 3 {
		got := d.Deliver(context.Background(), lease(t, s, k, a.srv.URL, 1))
		if got.Kind != relay.Retry || !strings.Contains(got.Reason, "no cron key encryption key") {
			t.Fatalf("outcome %+v, want a retry: no cron key encryption key", got)
		}
	}
	if n := strings.Count(logs.String(), "no cron key encryption key"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs.String())
	}
	if n := a.calls.Load(); n != 0 {
		t.Fatalf("the agent was called %d times", n)
	}
}

// TestRoute: direct leases go to the direct deliverer, others to the
// mediated one.
func TestRoute(t *testing.T) {
	t.Parallel()
	s := newSealer(t)
	k, _ := cronkey.Mint()
	a := newAgent(t, k)
	var mediated atomic.Int32
	r := direct.Route(newDeliverer(t, s, nil), relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		mediated.Add(1)
		return relay.Outcome{Kind: relay.Done, Reason: "mediated"}
	}))
	l := lease(t, s, k, a.srv.URL, 1)
	if got := r.Deliver(context.Background(), l); got.Reason != "delivered: accepted" || a.calls.Load() != 1 || mediated.Load() != 0 {
		t.Fatalf("direct lease: %+v, %d agent calls, %d mediated", got, a.calls.Load(), mediated.Load())
	}
	l.Direct = relay.DirectKey{}
	if got := r.Deliver(context.Background(), l); got.Reason != "mediated" || a.calls.Load() != 1 || mediated.Load() != 1 {
		t.Fatalf("mediated lease: %+v, %d agent calls, %d mediated", got, a.calls.Load(), mediated.Load())
	}
}

// TestNoKeyInLogsOrReasons delivers direct fires down every path (delivered,
// retried, refused, dead-lettered, a key that does not open, no encryption
// key), concurrently, with debug logs captured, and finds the key in none of
// the logs, the outcomes' reasons or their records, in any spelling (raw,
// base64 of either alphabet, hex) nor the tokens the agent received.
func TestNoKeyInLogsOrReasons(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := newSealer(t)
	k, _ := cronkey.Mint()
	other, _ := cronkey.Mint()
	good, wrong := newAgent(t, k), newAgent(t, other)
	down := newAgent(t, k)
	down.answer = answerWith(503, "1", `{"error":"waking"}`)
	withKey, without, foreign := newDeliverer(t, s, log), newDeliverer(t, nil, log), newDeliverer(t, newSealer(t), log)
	var mu sync.Mutex
	var text []string
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := []*direct.Deliverer{withKey, without, foreign}[i%3]
			a := []*agent{good, wrong, down}[i/3%3]
			out := d.Deliver(context.Background(), lease(t, s, k, a.srv.URL, 1+i%5))
			mu.Lock()
			defer mu.Unlock()
			text = append(text, out.Reason)
			if out.Record != nil {
				text = append(text, out.Record.Reason)
			}
		}()
	}
	wg.Wait()
	if good.calls.Load() == 0 || wrong.calls.Load() == 0 || down.calls.Load() == 0 {
		t.Fatalf("not every path was taken: %d, %d, %d calls", good.calls.Load(), wrong.calls.Load(), down.calls.Load())
	}
	text = append(text, logs.String())
	for _, a := range []*agent{good, wrong, down} {
		a.mu.Lock()
		tokens := a.tokens
		a.mu.Unlock()
		for _, tok := range tokens {
			for _, tx := range text {
				if strings.Contains(tx, tok) {
					t.Fatalf("a token shows in %q", tx)
				}
			}
		}
	}
	all := strings.Join(text, "\n")
	if !strings.Contains(all, "no cron key encryption key") || !strings.Contains(all, "does not open") {
		t.Fatalf("not every failure was met:\n%s", all)
	}
	for _, secret := range secretForms(k, "") {
		if strings.Contains(all, secret) {
			t.Fatalf("the key shows (as %q) in:\n%s", secret, all)
		}
	}
	if bytes.Contains([]byte(all), k.Secret) {
		t.Fatal("the key's raw bytes show")
	}
}

// secretForms are the spellings of k's secret (and of its sealed form, when
// given) a leak would show.
func secretForms(k cronkey.Key, sealed string) []string {
	forms := []string{
		k.Encoded(),
		base64.StdEncoding.EncodeToString(k.Secret),
		base64.RawStdEncoding.EncodeToString(k.Secret),
		base64.URLEncoding.EncodeToString(k.Secret),
		hex.EncodeToString(k.Secret),
		string(k.Secret),
	}
	if sealed != "" {
		forms = append(forms, sealed)
	}
	return forms
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
