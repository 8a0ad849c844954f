package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
)

// TestLogLevelIsCheckedAlike runs chronos nas, chronos relay and chronos
// agent serve with log levels outside debug, info, warn and error: each
// refuses to start with a usage error (exit 2) naming the setting.
func TestLogLevelIsCheckedAlike(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	config := func(name, level string) string {
		p := filepath.Join(dir, name)
		data := "public_url: http://nas.example\nagents_file: agents.yaml\nstore: redis://127.0.0.1:1\nrelay:\n  secrets: [" +
			contract.FormatWebhookSecret(key) + "]\nlog_level: " + level + "\n"
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	offset, unknown := config("offset.yaml", `"warn+2"`), config("unknown.yaml", "loud")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nas offset", []string{"nas", "--config", offset}, `log_level: "warn+2"`},
		{"nas unknown", []string{"nas", "--config", unknown}, `log_level: "loud"`},
		{"relay offset", []string{"relay", "--config", offset}, `log_level: "warn+2"`},
		{"relay unknown", []string{"relay", "--config", unknown}, `log_level: "loud"`},
		{"agent offset", []string{"agent", "serve", "--listen", "127.0.0.1:0", "--log-level", "warn+2"}, `--log-level: "warn+2"`},
		{"agent unknown", []string{"agent", "serve", "--listen", "127.0.0.1:0", "--log-level", "loud"}, `--log-level: "loud"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := tc.args
			if args[0] == "agent" {
				args = append(args, "--home", t.TempDir())
			}
			// A process that wrongly starts is stopped after a while, and
			// then fails the exit code check.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			if code := run(ctx, args, &stdout, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q does not name %q", stderr.String(), tc.want)
			}
		})
	}
}

// TestRelayRefusesUncheckedLogLevel gives runRelay a configuration that did
// not pass through the config loader: a bad log_level is still refused, not
// silently read as info.
func TestRelayRefusesUncheckedLogLevel(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	cfg := nas.Config{
		PublicURL: "http://nas.example",
		Store:     "memory",
		LogLevel:  "loud",
		Relay:     nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(key)}, NASURL: "http://127.0.0.1:1"},
	}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := runRelay(ctx, node.RelayOptions{Config: cfg}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `log_level: "loud"`) {
		t.Fatalf("runRelay with log_level loud: %v, want an error naming log_level", err)
	}
}

// TestParseLogLevel pins the four levels, in any case, and nothing else.
func TestParseLogLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want slog.Level
		ok   bool
	}{
		{"debug", slog.LevelDebug, true},
		{"INFO", slog.LevelInfo, true},
		{"Warn", slog.LevelWarn, true},
		{"error", slog.LevelError, true},
		{"", 0, false},
		{"warning", 0, false},
		{"warn+2", 0, false},
		{"DEBUG-4", 0, false},
		{"4", 0, false},
	} {
		got, err := parseLogLevel("log_level", tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parseLogLevel(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "log_level")) {
			t.Errorf("parseLogLevel(%q): error %v does not name the key", tc.in, err)
		}
	}
}
