package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
)

// TestRelayCommandRefusesBadSetups checks the usage errors of chronos relay.
func TestRelayCommandRefusesBadSetups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	base := "public_url: http://nas.example\nagents_file: agents.yaml\nrelay:\n  secrets: [whsec_" + base64.StdEncoding.EncodeToString(key) + "]\n"
	write := func(name, store string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(base+"store: "+store+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	memory := write("memory.yaml", "memory")
	redis := write("redis.yaml", "redis://127.0.0.1:1")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"memory store", []string{"relay", "--config", memory}, "memory"},
		{"no dispatchers", []string{"relay", "--config", redis, "--dispatchers", "0"}, "at least 1"},
		{"lease too short", []string{"relay", "--config", redis, "--lease", "1ms"}, "--lease"},
		{"missing config", []string{"relay", "--config", filepath.Join(dir, "nope.yaml")}, "config"},
		{"stray argument", []string{"relay", "extra"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tc.want)
			}
		})
	}
}

// TestRelayStopsWithOpsListener ends a relay that serves health and metrics:
// the ops server must be shut down before runRelay waits for it.
func TestRelayStopsWithOpsListener(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	cfg := nas.Config{
		PublicURL: "http://nas.example",
		Store:     "memory",
		Relay:     nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(key)}, NASURL: "http://127.0.0.1:1"},
	}.WithDefaults()
	listen := nasFreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runRelay(ctx, node.RelayOptions{Config: cfg, Listen: listen}, io.Discard) }()
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://" + listen + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay's ops server never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("relay did not shut down")
	}
}
