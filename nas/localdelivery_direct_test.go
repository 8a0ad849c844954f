package nas_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
	"github.com/chronoscron/chronos/relay/memory"
)

// TestLocalDelivererDirect: NAS's own dispatchers deliver a direct fire
// signed under the job's cron key (not NAS's key), with NAS's issuer and the
// claims of its own tokens, and map the agent's answers as for a mediated
// fire; without the encryption key the fire is retried, and a key that does
// not open is dead-lettered, the agent not called.
func TestLocalDelivererDirect(t *testing.T) {
	t.Parallel()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	ring, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i", TokenSHA256: nas.TokenSHA256("t")}})
	if err != nil {
		t.Fatal(err)
	}
	secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
	cfg := nas.Config{PublicURL: "https://nas.example.com", Relay: nas.RelayConfig{Secrets: []string{secret}}, AllowPrivateCallbacks: true}
	svc, err := nas.New(nas.Options{Config: cfg, Engine: eng, Verifier: agents, Keys: ring, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)

	encKey, _ := cronkey.GenerateEncryptionKey()
	raw, _ := cronkey.ParseEncryptionKey(encKey)
	sealer, _ := cronkey.NewSealer(raw)
	key, _ := cronkey.Mint()
	sealed, err := sealer.Seal("a", "job-1", key)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var status atomic.Int32
	status.Store(http.StatusAccepted)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		var fire contract.FireRequest
		_ = json.Unmarshal(body, &fire)
		tok, _ := strings.CutPrefix(r.Header.Get(contract.HeaderAuthorization), contract.BearerPrefix)
		var c contract.FireClaims
		_, err := jwt.ParseWithClaims(tok, &c, func(tk *jwt.Token) (any, error) {
			if tk.Header["kid"] != key.ID {
				return nil, jwt.ErrTokenUnverifiable
			}
			return key.Secret, nil
		}, jwt.WithValidMethods([]string{contract.DirectTokenAlg}), jwt.WithIssuer(cfg.PublicURL), jwt.WithAudience(contract.Audience("i")))
		if err != nil || c.Purpose != contract.PurposeCronFire || c.BodyHash != contract.BodyHash(body) || c.FireAt != fire.FireAt.Text() || c.JobID != "job-1" {
			t.Errorf("the agent refused the token: %v %+v", err, c)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(`{"status":"accepted"}`))
	}))
	t.Cleanup(agent.Close)

	at := time.Now().Add(-time.Second)
	lease := func(sealedKey string) relay.Lease {
		return relay.Lease{
			OneShot: relay.OneShot{ScheduleID: "s-" + time.Now().Format(time.RFC3339Nano), AgentID: "a", InstanceID: "i", JobID: "job-1", FireAt: at,
				FireAtSpelling: at.In(time.FixedZone("", -5*3600)).Format(time.RFC3339Nano), CallbackURL: agent.URL, Attempt: 1,
				Direct: relay.DirectKey{Sealed: sealedKey, KeyID: key.ID, MintedAt: at}},
			Token: 1, ClaimedAt: time.Now(),
		}
	}
	ctx := context.Background()

	without := svc.LocalDeliverer()
	if out := without.Deliver(ctx, lease(sealed)); out.Kind != relay.Retry || !strings.Contains(out.Reason, "no cron key encryption key") {
		t.Fatalf("without the encryption key: %+v", out)
	}
	d := svc.LocalDeliverer().WithCronKeys(sealer)
	out := d.Deliver(ctx, lease(sealed))
	if out.Kind != relay.Done || out.Reason != "delivered: accepted" || out.Record == nil || out.Record.Outcome != relay.LastFireDelivered {
		t.Fatalf("delivered: %+v", out)
	}
	status.Store(http.StatusServiceUnavailable)
	if out := d.Deliver(ctx, lease(sealed)); out.Kind != relay.Retry || !out.AgentDown || !out.ColdStart {
		t.Fatalf("503: %+v, want agent down, as for a mediated fire", out)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the agent was called %d times, want 2", n)
	}
	other, _ := cronkey.Mint()
	foreign, _ := sealer.Seal("a", "job-2", other)
	out = d.Deliver(ctx, lease(foreign))
	if out.Kind != relay.Dead || !strings.Contains(out.Reason, "does not open") || strings.Contains(out.Reason, other.Encoded()) {
		t.Fatalf("a key that does not open: %+v", out)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the agent was called for a key that does not open")
	}
}

// TestRelayRouteDeliversDirect: a direct job's fire posted to the relay
// route (by a relay process older than direct delivery) is signed under the
// job's cron key with the service's encryption key, not NAS's key.
func TestRelayRouteDeliversDirect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	ring, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i", TokenSHA256: nas.TokenSHA256("t")}})
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "cron.key")
	text, _ := cronkey.GenerateEncryptionKey()
	if err := os.WriteFile(keyFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	sealer, err := cronkey.LoadSealer(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	relaySecret := []byte("0123456789abcdef0123456789abcdef")
	cfg := nas.Config{PublicURL: "https://nas.example.com", AllowPrivateCallbacks: true,
		Relay: nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(relaySecret)}, CronKeyEncryptionKeyFile: keyFile}}
	svc, err := nas.New(nas.Options{Config: cfg, Engine: eng, Verifier: agents, Keys: ring, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)

	key, _ := cronkey.Mint()
	var direct atomic.Int32
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tok, _ := strings.CutPrefix(r.Header.Get(contract.HeaderAuthorization), contract.BearerPrefix)
		var c contract.FireClaims
		if _, err := jwt.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return key.Secret, nil },
			jwt.WithValidMethods([]string{contract.DirectTokenAlg}), jwt.WithIssuer(cfg.PublicURL)); err != nil || c.BodyHash != contract.BodyHash(body) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		direct.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(agent.Close)
	sealed, _ := sealer.Seal("a", "job-1", key)
	at := time.Now().Add(time.Minute)
	if _, err := eng.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i", JobID: "job-1", FireAt: at, CallbackURL: agent.URL, ScheduleID: "s-1",
		Direct: relay.DirectKey{Sealed: sealed, KeyID: key.ID, MintedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(contract.RelayRequest{ScheduleID: "s-1", AgentID: "a", JobID: "job-1", FireAt: contract.NewTime(at), Attempt: 1})
	h := contract.WebhookHeaders([][]byte{relaySecret}, "d-1", time.Now(), body)
	resp, err := svc.Fires().Relay(ctx, nas.RelayHeaders{ID: h[contract.HeaderWebhookID], Timestamp: h[contract.HeaderWebhookTimestamp], Signature: h[contract.HeaderWebhookSignature]}, body)
	if err != nil || resp.Kind != nas.VerdictDelivered || direct.Load() != 1 {
		t.Fatalf("relay route: %+v, %v; %d direct tokens verified", resp, err, direct.Load())
	}
}
