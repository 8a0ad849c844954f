package sidecar_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/sidecar"
	"github.com/chronoscron/chronos/contract"
)

// directNAS is a NAS that grants direct delivery: it answers each direct
// provision with the job's cron key, minting one for a job that has none
// or that was re-keyed, and lists the arms with their delivery.
type directNAS struct {
	t        *testing.T
	url      string
	instance string
	signer   *fireauthtest.Key // NAS's own key: JWKS, reconcile tokens

	mu         sync.Mutex
	arms       map[string]contract.ArmedJob
	keys       map[string]directKey
	rekey      map[string]bool
	provisions []contract.ProvisionRequest
	seq        int
}

type directKey struct {
	id     string
	secret []byte
}

func (k directKey) encoded() string { return base64.RawURLEncoding.EncodeToString(k.secret) }

func startDirectNAS(t *testing.T, token, instance string) *directNAS {
	t.Helper()
	signer, err := fireauthtest.NewKey("ES256", "nas-es")
	if err != nil {
		t.Fatal(err)
	}
	n := &directNAS{t: t, instance: instance, signer: signer, arms: map[string]contract.ArmedJob{}, keys: map[string]directKey{}, rekey: map[string]bool{}}
	ln := listener(t)
	n.url = "http://" + ln.Addr().String()
	jwks, err := fireauthtest.JWKS(signer)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+contract.PathJWKS, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jwks)
	})
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				contract.WriteError(w, contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "no"))
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST "+contract.PathProvision, auth(n.provision))
	mux.HandleFunc("POST "+contract.PathCancel, auth(func(w http.ResponseWriter, r *http.Request) {
		var req contract.CancelRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		n.mu.Lock()
		delete(n.arms, req.JobID)
		delete(n.keys, req.JobID)
		n.mu.Unlock()
		contract.WriteJSON(w, http.StatusOK, contract.OKResponse{OK: true})
	}))
	mux.HandleFunc("GET "+contract.PathList, auth(func(w http.ResponseWriter, _ *http.Request) {
		n.mu.Lock()
		out := contract.ListResponse{Armed: []contract.ArmedJob{}}
		for _, a := range n.arms {
			out.Armed = append(out.Armed, a)
		}
		n.mu.Unlock()
		contract.WriteJSON(w, http.StatusOK, out)
	}))
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return n
}

func (n *directNAS) provision(w http.ResponseWriter, r *http.Request) {
	var req contract.ProvisionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		contract.WriteError(w, contract.BadRequest(contract.CodeInvalidRequest, "%v", err))
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.provisions = append(n.provisions, req)
	n.seq++
	arm := contract.ArmedJob{JobID: req.JobID, FireAt: req.FireAt, ScheduleID: fmt.Sprintf("sch_%d", n.seq), AgentCallbackURL: req.AgentCallbackURL}
	resp := contract.ProvisionResponse{ScheduleID: arm.ScheduleID, FireAt: req.FireAt, Armed: true}
	if req.Delivery == contract.DeliveryDirect {
		k, ok := n.keys[req.JobID]
		if !ok || n.rekey[req.JobID] {
			k = directKey{id: fmt.Sprintf("%s%s-%d", contract.CronKeyIDPrefix, req.JobID, n.seq), secret: make([]byte, contract.CronKeyBytes)}
			if _, err := rand.Read(k.secret); err != nil {
				n.t.Error(err)
			}
			n.keys[req.JobID] = k
			delete(n.rekey, req.JobID)
		}
		arm.Delivery = contract.DeliveryDirect
		resp.Delivery, resp.CronKeyID, resp.CronKey = contract.DeliveryDirect, k.id, k.encoded()
	}
	n.arms[req.JobID] = arm
	contract.WriteJSON(w, http.StatusOK, resp)
}

// arm returns the job's armed fire and its current key.
func (n *directNAS) arm(jobID string) (contract.ArmedJob, directKey, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.arms[jobID]
	return a, n.keys[jobID], ok
}

// sign returns the token a relay dispatcher signs for a fire of arm under
// k: HS256 with golang-jwt, kid the key's id, the claims of a NAS token.
func (n *directNAS) sign(t *testing.T, k directKey, a contract.ArmedJob, body []byte) string {
	t.Helper()
	now := time.Now()
	claims := &contract.FireClaims{
		TokenClaims: contract.TokenClaims{
			Issuer: n.url, Audience: contract.Audience(n.instance), Purpose: contract.PurposeCronFire,
			ID: fmt.Sprintf("jti-%d", now.UnixNano()), IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(contract.DirectTokenLifetimeSeconds * time.Second)),
		},
		JobID: a.JobID, FireAt: a.FireAt.Text(), ScheduleID: a.ScheduleID, Attempt: 1, BodyHash: contract.BodyHash(body),
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["typ"] = contract.TokenTypeCronFire
	tok.Header["kid"] = k.id
	s, err := tok.SignedString(k.secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fireBody is the body a dispatcher POSTs for arm.
func fireBody(t *testing.T, a contract.ArmedJob) []byte {
	t.Helper()
	b, err := json.Marshal(contract.FireRequest{JobID: a.JobID, FireAt: a.FireAt, ScheduleID: a.ScheduleID, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends a request with a bearer token and returns the status and
// body.
func post(t *testing.T, url, token string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// syncBuffer is a log sink safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// eventually polls cond for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunDirectDelivery runs direct delivery end to end through the real
// agent: it asks NAS for direct delivery and keeps the key NAS answers; a
// fire signed with golang-jwt HS256 under that key runs the job once; a
// NAS token, another job's key and a replay of the slot run nothing; a
// re-key provisions the job again and the fire armed under the old key
// still runs. The key is in no log line, status output or local API
// answer.
func TestRunDirectDelivery(t *testing.T) {
	t.Parallel()
	const token, instance = "agent-d-token", "inst-d"
	n := startDirectNAS(t, token, instance)
	ln, uiLn := listener(t), listener(t)
	cfg := builtinConfig(t)
	cfg.UIListen = uiLn.Addr().String()
	cfg.Cron = provider.CronConfig{Provider: provider.Chronos, Chronos: provider.ChronosConfig{
		PortalURL: n.url, CallbackURL: "http://" + ln.Addr().String(), NASJWKSURL: n.url + contract.PathJWKS,
		ExpectedAudience: "agent:" + instance, AccessToken: token, Delivery: contract.DeliveryDirect,
	}}
	if d := provider.Decide(cfg); !d.Chronos() {
		t.Fatalf("decision %+v", d)
	}
	rt, err := agent.Open(context.Background(), agent.Config{Home: cfg.Home})
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "runs")
	for _, id := range []string{"tick", "tock"} {
		// Every 20 s from now: the first slot is within the agent's
		// allowance for early fires, so the test fires it at once.
		if _, _, err := rt.AddJob(context.Background(), agent.JobSpec{ID: id, Schedule: "every 20s",
			Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "echo $CHRONOS_JOB_ID >> " + marker}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	notif := newNotifier()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := start(ctx, sidecar.Options{Config: cfg, Logger: log, Listener: ln, UIListener: uiLn, Notifier: notif})
	notif.awaitReady(t, done)
	fireURL := "http://" + ln.Addr().String() + contract.PathFire

	var seen []string // every key NAS handed out
	keys, err := cronkeys.Open(cfg.Home, cronkeys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, k1, ok := n.arm("tick")
	if !ok || a.Delivery != contract.DeliveryDirect || k1.id == "" {
		t.Fatalf("tick armed %+v (%v), key %q", a, ok, k1.id)
	}
	_, other, _ := n.arm("tock")
	seen = append(seen, k1.encoded(), other.encoded())
	if !keys.Direct("tick") {
		t.Fatal("the agent did not store tick's key before it was ready")
	}
	info, err := os.Stat(filepath.Join(cfg.Home, cronkeys.File))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", info, err)
	}

	runs := func() int {
		b, _ := os.ReadFile(marker)
		return strings.Count(string(b), "tick")
	}
	body := fireBody(t, a)
	// Refused, nothing run: NAS's own token for a direct job, and a token
	// under another job's key.
	nasTok, err := fireauthtest.Mint(n.signer, fireauthtest.NewFire(n.url, "agent:"+instance, time.Now(),
		contract.FireRequest{JobID: a.JobID, FireAt: a.FireAt, ScheduleID: a.ScheduleID, Attempt: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"NAS token": nasTok, "other job's key": n.sign(t, other, a, body)} {
		if code, resp := post(t, fireURL, tok, body); code != http.StatusUnauthorized || !strings.Contains(resp, contract.CodeInvalidToken) {
			t.Fatalf("%s: %d %s", name, code, resp)
		}
	}
	// The dispatcher's fire runs the job once.
	if code, resp := post(t, fireURL, n.sign(t, k1, a, body), body); code != http.StatusAccepted {
		t.Fatalf("direct fire: %d %s", code, resp)
	}
	eventually(t, "the run", func() bool { return runs() == 1 })
	if code, resp := post(t, fireURL, n.sign(t, k1, a, body), body); code != http.StatusOK || !strings.Contains(resp, contract.FireDuplicate) {
		t.Fatalf("replayed fire: %d %s", code, resp)
	}

	// The next slot is armed under the same key; then NAS re-keys.
	eventually(t, "the next slot armed", func() bool { b, _, _ := n.arm("tick"); return b.FireAt.After(a.FireAt.Time) })
	next, k, _ := n.arm("tick")
	if k.id != k1.id {
		t.Fatalf("the key changed without a re-key: %s", k.id)
	}
	n.mu.Lock()
	n.rekey["tick"], n.rekey["tock"] = true, true
	before := len(n.provisions)
	n.mu.Unlock()
	rbody, err := json.Marshal(contract.ReconcileRequest{InstanceID: instance, Reason: contract.ReconcileReasonRekey})
	if err != nil {
		t.Fatal(err)
	}
	rtok, err := fireauthtest.MintReconcile(n.signer, fireauthtest.Fire{Issuer: n.url, Audience: "agent:" + instance, Now: time.Now(), Body: rbody})
	if err != nil {
		t.Fatal(err)
	}
	if code, resp := post(t, "http://"+ln.Addr().String()+contract.PathReconcile, rtok, rbody); code != http.StatusAccepted {
		t.Fatalf("rekey: %d %s", code, resp)
	}
	var k2 directKey
	eventually(t, "the re-key", func() bool {
		var b contract.ArmedJob
		b, k2, _ = n.arm("tick")
		_, through, ok := keys.CronKey(ctx, "tick", k1.id)
		return k2.id != k1.id && b.FireAt.Equal(next.FireAt.Time) && keys.Direct("tick") && ok && !through.IsZero()
	})
	n.mu.Lock()
	reprovisioned := len(n.provisions) - before
	n.mu.Unlock()
	if reprovisioned < 2 {
		t.Fatalf("re-key provisioned %d jobs, want both", reprovisioned)
	}
	_, tockKey, _ := n.arm("tock")
	seen = append(seen, k2.encoded(), tockKey.encoded())
	// The fire armed before the re-key, signed under the old key, runs.
	eventually(t, "the next slot within the allowance", func() bool { return time.Until(next.FireAt.Time) < 25*time.Second })
	nbody := fireBody(t, next)
	if code, resp := post(t, fireURL, n.sign(t, k1, next, nbody), nbody); code != http.StatusAccepted {
		t.Fatalf("fire armed before the re-key, old key: %d %s", code, resp)
	}
	eventually(t, "the second run", func() bool { return runs() == 2 })

	// The key is nowhere to be read: status (JSON and text) and the local
	// API's job views.
	report, err := sidecar.Status(ctx, sidecar.StatusOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if report.Delivery["tick"] != contract.DeliveryDirect || report.Delivery["tock"] != contract.DeliveryDirect {
		t.Fatalf("status deliveries %v", report.Delivery)
	}
	statusJSON, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := report.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "DELIVERY") || !strings.Contains(text.String(), "direct") {
		t.Fatalf("status text shows no delivery:\n%s", text.String())
	}
	uiToken, err := os.ReadFile(filepath.Join(cfg.Home, "ui-token"))
	if err != nil {
		t.Fatal(err)
	}
	var api strings.Builder
	for _, path := range []string{"/api/jobs", "/api/jobs/tick?reveal=env", "/api/status"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+uiLn.Addr().String()+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(uiToken)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		api.Write(b)
	}
	if !strings.Contains(api.String(), `"delivery":"direct"`) {
		t.Fatalf("the local API shows no delivery: %s", api.String())
	}
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	for _, key := range seen {
		for where, out := range map[string]string{"log": logs.String(), "status": string(statusJSON) + text.String(), "local API": api.String()} {
			if strings.Contains(out, key) {
				t.Fatalf("a cron key is in the %s", where)
			}
		}
	}
	if got := runs(); got != 2 {
		t.Fatalf("tick ran %d times, want 2", got)
	}
}
