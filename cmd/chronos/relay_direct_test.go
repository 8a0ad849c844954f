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
