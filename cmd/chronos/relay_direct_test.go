package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay/cronkey"
)

// TestRelayRefusesBadCronKeyFile: chronos relay refuses at start an
// encryption key file its group or others may read, or that holds no key,
// whether the flag or relay.cron_key_encryption_key_file names it.
func TestRelayRefusesBadCronKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	good, _ := cronkey.GenerateEncryptionKey()
	file := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	open := file("open.key", good, 0o644)
	short := file("short.key", "c2hvcnQ=", 0o600)
	base := "public_url: http://nas.example\nagents_file: agents.yaml\nstore: redis://127.0.0.1:1\nrelay:\n  secrets: [whsec_" + base64.StdEncoding.EncodeToString(secret) + "]\n"
	config := file("relay.yaml", base, 0o600)
	configOpen := file("relay-open.yaml", base+"  cron_key_encryption_key_file: open.key\n", 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"flag, open permissions", []string{"relay", "--config", config, "--cron-key-encryption-key-file", open}, "readable by group or others"},
		{"flag, no key", []string{"relay", "--config", config, "--cron-key-encryption-key-file", short}, "not 32 bytes"},
		{"flag, missing", []string{"relay", "--config", config, "--cron-key-encryption-key-file", filepath.Join(dir, "none")}, "--cron-key-encryption-key-file"},
		{"config, open permissions", []string{"relay", "--config", configOpen}, "readable by group or others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code == 0 {
				t.Fatal("chronos relay started")
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tc.want)
			}
		})
	}
}

// TestNASRefusesBadDirectSettings: chronos nas refuses at start, with an
// error naming the problem, an agents file with an unknown delivery mode, a
// direct agent without relay.cron_key_encryption_key_file, and an
// encryption key file its group or others may read.
func TestNASRefusesBadDirectSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, _ := cronkey.GenerateEncryptionKey()
	file("open.key", good, 0o644)
	file("good.key", good, 0o600)
	const sum = "0000000000000000000000000000000000000000000000000000000000000000"
	file("agents-direct.yaml", "- agent_id: a1\n  instance_id: i1\n  token_sha256: "+sum+"\n  delivery: direct\n", 0o600)
	file("agents-unknown.yaml", "- agent_id: a1\n  instance_id: i1\n  token_sha256: "+sum+"\n  delivery: straight\n", 0o600)
	nas := func(name, agents, keyFile string) string {
		text := "listen: 127.0.0.1:0\npublic_url: http://nas.example\nstore: memory\nsigning_keys_dir: keys\nagents_file: " + agents +
			"\nrelay:\n  dispatchers: 0\n  secrets: [whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "]\n"
		if keyFile != "" {
			text += "  cron_key_encryption_key_file: " + keyFile + "\n"
		}
		return file(name, text, 0o600)
	}
	if code, out, errOut := nasRunCLI(t, "keys", "generate", "--out", filepath.Join(dir, "keys"), "--activate"); code != 0 {
		t.Fatalf("keys generate: %d %s %s", code, out, errOut)
	}
	for _, tc := range []struct {
		name, config, want string
	}{
		{"unknown delivery mode", nas("unknown.yaml", "agents-unknown.yaml", "good.key"), "straight"},
		{"direct agent, no encryption key", nas("nokey.yaml", "agents-direct.yaml", ""), "cron_key_encryption_key_file"},
		{"encryption key readable by others", nas("open.yaml", "agents-direct.yaml", "open.key"), "readable by group or others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			if code := run(ctx, []string{"nas", "--config", tc.config}, &stdout, &stderr); code == 0 {
				t.Fatal("chronos nas started")
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tc.want)
			}
		})
	}
}
