package sidecar_test

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/sidecar"
)

// writeSecret writes a secret file with exactly mode, making its directory.
func writeSecret(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestExposedSecretFiles: each secret file the agent reads is reported when
// its group or others may read it, and not when it is 0600 or missing.
func TestExposedSecretFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	t.Parallel()
	for _, tc := range []struct {
		name string
		file func(cfg *provider.Config) string // sets the config, returns the file
	}{
		{"access token file", func(cfg *provider.Config) string {
			cfg.Cron.Chronos.AccessTokenFile = filepath.Join(filepath.Dir(cfg.Home), "access-token")
			return cfg.Cron.Chronos.AccessTokenFile
		}},
		{"ui token file", func(cfg *provider.Config) string {
			cfg.UITokenFile = filepath.Join(filepath.Dir(cfg.Home), "ui-token")
			return cfg.UITokenFile
		}},
		{"default ui token", func(cfg *provider.Config) string { return filepath.Join(cfg.Home, localapi.TokenFile) }},
		{"webhook secret", func(cfg *provider.Config) string {
			return filepath.Join(notify.HomeDir(cfg.Home), notify.SecretFile)
		}},
	} {
		for _, mode := range []fs.FileMode{0o644, 0o640, 0o600} {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				cfg := builtinConfig(t)
				path := tc.file(&cfg)
				if got := sidecar.ExposedSecretFiles(cfg); len(got) != 0 {
					t.Fatalf("missing file reported: %v", got)
				}
				if !slices.Contains(sidecar.SecretFiles(cfg), path) {
					t.Fatalf("%s is not among the secret files %v", path, sidecar.SecretFiles(cfg))
				}
				writeSecret(t, path, mode)
				got := sidecar.ExposedSecretFiles(cfg)
				if mode == 0o600 {
					if len(got) != 0 {
						t.Fatalf("0600 file reported: %v", got)
					}
					return
				}
				if len(got) != 1 || got[0].Path != path || got[0].Mode != mode {
					t.Fatalf("exposed = %v, want %s mode %04o", got, path, mode)
				}
			})
		}
	}
}

// TestStatusShowsExposedSecretFiles: agent status lists a secret file its
// group or others may read, with the fix, in the report and its summary.
func TestStatusShowsExposedSecretFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	t.Parallel()
	cfg := builtinConfig(t)
	token := filepath.Join(cfg.Home, localapi.TokenFile)
	writeSecret(t, token, 0o644)
	report, err := sidecar.Status(context.Background(), sidecar.StatusOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.ExposedSecretFiles) != 1 || report.ExposedSecretFiles[0].Path != token {
		t.Fatalf("report lists %v, want %s", report.ExposedSecretFiles, token)
	}
	if !slices.ContainsFunc(report.Summary(), func(l sidecar.Line) bool {
		return l.Label == "secret" && strings.Contains(l.Text, "chmod 600 "+token) && strings.Contains(l.Text, "0644")
	}) {
		t.Fatalf("summary says nothing of %s: %+v", token, report.Summary())
	}

	if err := os.Chmod(token, 0o600); err != nil {
		t.Fatal(err)
	}
	report, err = sidecar.Status(context.Background(), sidecar.StatusOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.ExposedSecretFiles) != 0 {
		t.Fatalf("a 0600 token is reported: %v", report.ExposedSecretFiles)
	}
}

// lockedBuffer is a bytes.Buffer safe for the agent's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunWarnsOfExposedSecretFiles: an agent started with an access token
// file of mode 0644 starts, and logs one warning naming the file, its mode
// and the fix; the 0600 admin token it reads is not warned about.
func TestRunWarnsOfExposedSecretFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	t.Parallel()
	cfg := builtinConfig(t)
	cfg.Cron.Chronos.AccessTokenFile = filepath.Join(filepath.Dir(cfg.Home), "access-token")
	writeSecret(t, cfg.Cron.Chronos.AccessTokenFile, 0o644)
	writeSecret(t, filepath.Join(cfg.Home, localapi.TokenFile), 0o600)
	var logs lockedBuffer
	n := newNotifier()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := start(ctx, sidecar.Options{
		Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Listener: listener(t), Notifier: n,
	})
	n.awaitReady(t, done)
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	var warned []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "secret file") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("%d secret file warnings, want 1:\n%s", len(warned), out)
	}
	for _, want := range []string{"file=" + cfg.Cron.Chronos.AccessTokenFile, "mode=0644", `fix="chmod 600 ` + cfg.Cron.Chronos.AccessTokenFile + `"`} {
		if !strings.Contains(warned[0], want) {
			t.Errorf("warning %q lacks %q", warned[0], want)
		}
	}
}
