package notify

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func sample(id string, t Target) Notification {
	code := 1
	return Notification{ID: id, Target: t, CreatedAt: time.Date(2026, 11, 24, 9, 1, 0, 0, time.UTC), Body: Body{
		ID: id, Event: EventFailed, JobID: "backup", RunID: "run-1", Slot: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC),
		Status: "failed", ExitCode: &code, DurationMS: 1234, Output: "disk full", Ledger: "runs/2026-11-24.jsonl#run-1",
		ConsecutiveFailures: 3, Time: time.Date(2026, 11, 24, 9, 1, 0, 0, time.UTC),
	}}
}

// delivery is one request a test receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint answering from a script (the last answer
// repeats) and recording every request.
type receiver struct {
	mu      sync.Mutex
	got     []delivery
	answers []int
	headers http.Header // added to every answer
	srv     *httptest.Server
	arrived chan struct{}
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers, headers: http.Header{}, arrived: make(chan struct{}, 1024)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{req.Header.Clone(), b})
		status := r.answers[min(len(r.got), len(r.answers))-1]
		for k, v := range r.headers {
			w.Header()[k] = v
		}
		r.mu.Unlock()
		w.WriteHeader(status)
		r.arrived <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

func loopbackSender(secret Secret, now func() time.Time) *WebhookSender {
	return NewWebhookSender(WebhookOptions{Secret: secret, Addresses: AddressPolicy{AllowPrivate: true}, Now: now, Timeout: 5 * time.Second})
}

func TestWebhookSendSignedAndVerified(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 204)
	secret := NewSecret()
	n := sample("ntf_1", Target{Kind: KindWebhook, URL: rcv.srv.URL + "/hook"})
	res := loopbackSender(secret, time.Now).Send(context.Background(), n)
	if res.Outcome != OutcomeSent || res.Status != 204 {
		t.Fatalf("result %+v", res)
	}
	d := rcv.deliveries()[0]
	if err := verifyStandardWebhook(secret.String(), d.header, d.body, time.Now()); err != nil {
		t.Fatalf("independent verification: %v", err)
	}
	if d.header.Get("webhook-id") != "ntf_1" || d.header.Get("Idempotency-Key") != "ntf_1" || d.header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", d.header)
	}
	if err := verifyStandardWebhook(NewSecret().String(), d.header, d.body, time.Now()); err == nil {
		t.Fatal("a different secret verified")
	}
	tampered := append([]byte(nil), d.body...)
	tampered[len(tampered)-2] ^= 1
	if err := verifyStandardWebhook(secret.String(), d.header, tampered, time.Now()); err == nil {
		t.Fatal("a changed body verified")
	}
	var b Body
	if err := json.Unmarshal(d.body, &b); err != nil || b.ID != "ntf_1" || b.JobID != "backup" || *b.ExitCode != 1 {
		t.Fatalf("body %s: %v", d.body, err)
	}
}

func TestWebhookClassify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		status     int
		retryAfter string
		want       Outcome
		wait       time.Duration
	}{
		{200, "", OutcomeSent, 0},
		{202, "", OutcomeSent, 0},
		{301, "", OutcomeDead, 0},
		{400, "", OutcomeDead, 0},
		{404, "", OutcomeDead, 0},
		{410, "", OutcomeDead, 0},
		{408, "", OutcomeRetry, 0},
		{429, "120", OutcomeRetry, 120 * time.Second},
		{503, now.Add(90 * time.Second).Format(http.TimeFormat), OutcomeRetry, 90 * time.Second},
		{500, "soon", OutcomeRetry, 0},
		{502, "-5", OutcomeRetry, 0},
	}
	for _, c := range cases {
		r := classify(c.status, c.retryAfter, []byte("busy"), now)
		if r.Outcome != c.want || r.RetryAfter != c.wait || r.Status != c.status {
			t.Errorf("%d %q: %+v, want %s after %s", c.status, c.retryAfter, r, c.want, c.wait)
		}
		if c.want != OutcomeSent && !strings.Contains(r.Error, "busy") {
			t.Errorf("%d: error %q lacks the answer", c.status, r.Error)
		}
	}
}

func TestWebhookRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, 200)
	redirect := httptest.NewServer(http.RedirectHandler(target.srv.URL, http.StatusTemporaryRedirect))
	t.Cleanup(redirect.Close)
	res := loopbackSender(NewSecret(), time.Now).Send(context.Background(), sample("ntf_r", Target{Kind: KindWebhook, URL: redirect.URL}))
	if res.Outcome != OutcomeDead || res.Status != 307 || len(target.deliveries()) != 0 {
		t.Fatalf("redirect: %+v, target got %d", res, len(target.deliveries()))
	}
}

// A host name (here localhost, from the hosts file) that resolves to a
// loopback address is refused when dialled, after resolution, and the
// notification is dead.
func TestWebhookPrivateRefusedAtDial(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 200)
	url := strings.Replace(rcv.srv.URL, "127.0.0.1", "localhost", 1)
	s := NewWebhookSender(WebhookOptions{Secret: NewSecret(), Timeout: 5 * time.Second})
	res := s.Send(context.Background(), sample("ntf_p", Target{Kind: KindWebhook, URL: url}))
	if res.Outcome != OutcomeDead || !strings.Contains(res.Error, "not allowed") {
		t.Fatalf("result %+v", res)
	}
	res = s.Send(context.Background(), sample("ntf_p", Target{Kind: KindWebhook, URL: rcv.srv.URL}))
	if res.Outcome != OutcomeDead || !strings.Contains(res.Error, "127.0.0.1") {
		t.Fatalf("literal: %+v", res)
	}
	if len(rcv.deliveries()) != 0 {
		t.Fatal("the private receiver was reached")
	}
	if !errors.Is(ValidateTarget(context.Background(), Target{Kind: KindWebhook, URL: rcv.srv.URL}, ValidateOptions{}), ErrAddressNotAllowed) {
		t.Fatal("validation let a loopback URL through")
	}
}

func TestWebhookNetworkErrorRetries(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 200)
	url := rcv.srv.URL
	rcv.srv.Close()
	res := loopbackSender(NewSecret(), time.Now).Send(context.Background(), sample("ntf_n", Target{Kind: KindWebhook, URL: url}))
	if res.Outcome != OutcomeRetry || res.Error == "" {
		t.Fatalf("result %+v", res)
	}
}

func TestCommandSender(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := `env | grep ^CHRONOS_ | sort > "$1"; cat > "$2"`
	n := sample("ntf_c", Target{Kind: KindCommand, Command: []string{"/bin/sh", "-c", script, "sh",
		filepath.Join(dir, "env"), filepath.Join(dir, "stdin")}})
	res := CommandSender{Env: []string{"PATH=/usr/bin:/bin"}}.Send(context.Background(), n)
	if res.Outcome != OutcomeSent {
		t.Fatalf("result %+v", res)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	for _, want := range []string{"CHRONOS_EVENT=failed", "CHRONOS_JOB_ID=backup", "CHRONOS_RUN_ID=run-1",
		"CHRONOS_NOTIFICATION_ID=ntf_c", "CHRONOS_EXIT_CODE=1", "CHRONOS_STATUS=failed", "CHRONOS_SLOT=2026-11-24T09:00:00Z",
		"CHRONOS_CONSECUTIVE_FAILURES=3", "CHRONOS_DURATION_MS=1234", "CHRONOS_LEDGER=runs/2026-11-24.jsonl#run-1"} {
		if !strings.Contains(string(env), want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
	stdin, _ := os.ReadFile(filepath.Join(dir, "stdin"))
	want, _ := Encode(n)
	if string(stdin) != string(want) {
		t.Fatalf("stdin %s, want %s", stdin, want)
	}
}

func TestCommandSenderFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	res := CommandSender{}.Send(ctx, sample("a", Target{Kind: KindCommand, Command: []string{"/bin/sh", "-c", "echo nope >&2; exit 3"}}))
	if res.Outcome != OutcomeRetry || res.Status != 3 || !strings.Contains(res.Error, "nope") {
		t.Fatalf("exit 3: %+v", res)
	}
	res = CommandSender{}.Send(ctx, sample("b", Target{Kind: KindCommand, Command: []string{"/nonexistent/notifier"}}))
	if res.Outcome != OutcomeDead {
		t.Fatalf("missing program: %+v", res)
	}
	start := time.Now()
	res = CommandSender{Timeout: 100 * time.Millisecond}.Send(ctx, sample("c", Target{Kind: KindCommand, Command: []string{"/bin/sleep", "30"}}))
	if res.Outcome != OutcomeRetry || !strings.Contains(res.Error, "timed out") || time.Since(start) > 10*time.Second {
		t.Fatalf("timeout: %+v after %s", res, time.Since(start))
	}
}

func TestFileSender(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "alerts.jsonl")
	// A torn line left by a crash: the next line must still be whole.
	if err := os.WriteFile(path, []byte(`{"id":"torn`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ntf_a", "ntf_b"} {
		if res := (FileSender{}).Send(context.Background(), sample(id, Target{Kind: KindFile, Path: path})); res.Outcome != OutcomeSent {
			t.Fatalf("result %+v", res)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var b Body
		if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
			if strings.Contains(sc.Text(), "torn") {
				continue
			}
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		ids = append(ids, b.ID)
	}
	if strings.Join(ids, ",") != "ntf_a,ntf_b" {
		t.Fatalf("ids %v", ids)
	}
	res := (FileSender{}).Send(context.Background(), sample("x", Target{Kind: KindFile, Path: filepath.Join(path, "sub")}))
	if res.Outcome != OutcomeRetry {
		t.Fatalf("unwritable path: %+v", res)
	}
}

func TestSendersDispatch(t *testing.T) {
	t.Parallel()
	res := Senders{File: FileSender{}}.Send(context.Background(), sample("x", Target{Kind: KindWebhook, URL: "https://example.com"}))
	if res.Outcome != OutcomeDead {
		t.Fatalf("no webhook sender: %+v", res)
	}
}

// A command target of a fanout parent's event finds the children's counts
// in its environment; other events have none of them.
func TestEventEnvFanout(t *testing.T) {
	t.Parallel()
	n := sample("ntf_f", Target{Kind: KindCommand, Command: []string{"true"}})
	for _, e := range EventEnv(n) {
		if strings.HasPrefix(e, "CHRONOS_FANOUT_") {
			t.Fatalf("a plain run's event has %s", e)
		}
	}
	n.Body.Event, n.Body.Status = EventPartial, "partial"
	n.Body.Fanout = &Fanout{Items: 200, Succeeded: 180, Failed: 20}
	env := strings.Join(EventEnv(n), "\n") + "\n"
	for _, want := range []string{"CHRONOS_EVENT=partial", "CHRONOS_STATUS=partial", "CHRONOS_FANOUT_ITEMS=200",
		"CHRONOS_FANOUT_SUCCEEDED=180", "CHRONOS_FANOUT_FAILED=20"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
}
