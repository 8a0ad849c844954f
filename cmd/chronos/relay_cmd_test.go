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
