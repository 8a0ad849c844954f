package node_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// TestRelayDeliversDirectFiresWithoutNAS runs a chronos relay process's
// dispatchers (node.RunRelay) on Redis with no NAS anywhere: the fires armed
// for direct delivery reach their agent, each once, signed under their
// job's cron key with NAS's issuer, and are acked; a mediated fire, which
// needs NAS's relay route, stays armed. The relay's logs show no key.
func TestRelayDeliversDirectFiresWithoutNAS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := redistest.Start(t, redistest.Options{})
	var p [6]byte
	_, _ = rand.Read(p[:])
	store := srv.URL() + "?prefix=direct-" + hex.EncodeToString(p[:])

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "cron-keys.key")
	text, _ := cronkey.GenerateEncryptionKey()
	if err := os.WriteFile(keyFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	sealer, err := cronkey.LoadSealer(keyFile)
	if err != nil {
		t.Fatal(err)
	}

	const issuer, jobs = "https://nas.example", 30
	keys := map[string]cronkey.Key{}
	var mu sync.Mutex
	got := map[string]int{}
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var fire contract.FireRequest
		_ = json.Unmarshal(body, &fire)
		tok, _ := strings.CutPrefix(r.Header.Get(contract.HeaderAuthorization), contract.BearerPrefix)
		var c contract.FireClaims
		_, err := jwt.ParseWithClaims(tok, &c, func(tk *jwt.Token) (any, error) {
			k := keys[fire.JobID]
			if tk.Header["kid"] != k.ID {
				return nil, jwt.ErrTokenUnverifiable
			}
			return k.Secret, nil
		}, jwt.WithValidMethods([]string{contract.DirectTokenAlg}), jwt.WithIssuer(issuer), jwt.WithAudience(contract.Audience("inst-a")))
		if err != nil || c.JobID != fire.JobID || c.BodyHash != contract.BodyHash(body) || c.ScheduleID != fire.ScheduleID {
			t.Errorf("the agent refused a token: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got[fire.ScheduleID]++
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"accepted"}`))
	}))
	t.Cleanup(agent.Close)

	engine, err := node.OpenEngine(ctx, store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	at := time.Now().Add(300 * time.Millisecond)
	for i := range jobs {
		job := fmt.Sprintf("job-%02d", i)
		k, _ := cronkey.Mint()
		keys[job] = k
		sealed, err := sealer.Seal("agent-a", job, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := engine.Arm(ctx, relay.ArmRequest{AgentID: "agent-a", InstanceID: "inst-a", JobID: job, FireAt: at, CallbackURL: agent.URL,
			ScheduleID: "sch-" + job, Direct: relay.DirectKey{Sealed: sealed, KeyID: k.ID, MintedAt: time.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := engine.Arm(ctx, relay.ArmRequest{AgentID: "agent-b", InstanceID: "inst-b", JobID: "mediated", FireAt: at, CallbackURL: agent.URL, ScheduleID: "sch-mediated"}); err != nil {
		t.Fatal(err)
	}

	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	one := 1
	cfg := nas.Config{
		PublicURL: issuer, Store: store, AllowPrivateCallbacks: true,
		Relay: nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(secret)}, NASURL: "http://127.0.0.1:1", Dispatchers: &one},
	}.WithDefaults()
	var logs syncLog
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- node.RunRelay(runCtx, node.RelayOptions{Config: cfg, CronKeyEncryptionKeyFile: keyFile,
			Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	}()
	for {
		st, err := engine.Stats(ctx)
		if err == nil && st.Armed == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("direct fires left in the store: %+v, %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != jobs {
		t.Fatalf("%d of %d direct fires reached the agent", len(got), jobs)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s reached the agent %d times", id, n)
		}
	}
	if _, err := engine.Get(ctx, "agent-b", "mediated"); err != nil {
		t.Fatalf("the mediated fire: %v, want it still armed (NAS is down)", err)
	}
	all := logs.String()
	for _, k := range keys {
		for _, form := range []string{k.Encoded(), base64.StdEncoding.EncodeToString(k.Secret), hex.EncodeToString(k.Secret)} {
			if strings.Contains(all, form) {
				t.Fatal("a cron key shows in the relay's logs")
			}
		}
	}
	if !strings.Contains(all, `"direct_delivery":true`) {
		t.Fatalf("the relay did not say it delivers direct fires:\n%s", all)
	}
}

// syncLog is a log sink safe for concurrent writers.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
