package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/sidecar"
)

func lookupMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadAgentConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "agent.yaml")
	writeFile(t, cfgPath, agentYAML(filepath.Join(dir, "home"), "https://nas.example", "https://agent.example", "agent:i1"))
	writeFile(t, filepath.Join(dir, "token"), "  secret-token\n")

	tests := []struct {
		name     string
		path     string
		env      map[string]string
		provider string
		check    func(t *testing.T, cfg provider.Config, d provider.Decision)
	}{
		{name: "file, token file relative to it", path: cfgPath, provider: provider.Chronos, check: func(t *testing.T, cfg provider.Config, _ provider.Decision) {
			if cfg.Cron.Chronos.AccessToken != "secret-token" {
				t.Fatalf("token %q", cfg.Cron.Chronos.AccessToken)
			}
		}},
		{name: "file named by the environment", env: map[string]string{envAgentConfig: cfgPath}, provider: provider.Chronos},
		{name: "environment wins", path: cfgPath, env: map[string]string{"CHRONOS_CRON_CHRONOS_CALLBACK_URL": "", "CHRONOS_ACCESS_TOKEN": "env-token"},
			provider: provider.Builtin, check: func(t *testing.T, cfg provider.Config, d provider.Decision) {
				if cfg.Cron.Chronos.AccessToken != "env-token" || !strings.Contains(d.Why(), "cron.chronos.callback_url is missing") {
					t.Fatalf("%+v: %s", cfg.Cron.Chronos, d.Why())
				}
			}},
		{name: "no file: defaults", env: map[string]string{"HOME": dir, "CHRONOS_HOME": filepath.Join(dir, "h2")}, provider: provider.Builtin,
			check: func(t *testing.T, cfg provider.Config, d provider.Decision) {
				if cfg.Listen != provider.DefaultListen || cfg.Home != filepath.Join(dir, "h2") || !strings.Contains(d.Why(), "cron.provider is empty") {
					t.Fatalf("%+v: %s", cfg, d.Why())
				}
			}},
		{name: "token file missing", path: cfgPath, env: map[string]string{"CHRONOS_CRON_CHRONOS_ACCESS_TOKEN_FILE": filepath.Join(dir, "nope")},
			provider: provider.Builtin, check: func(t *testing.T, _ provider.Config, d provider.Decision) {
				if !strings.Contains(d.Why(), "cron.chronos.access_token_file: open") {
					t.Fatalf("why %q", d.Why())
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, d, err := loadAgentConfig(tt.path, lookupMap(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if d.Provider != tt.provider {
				t.Fatalf("provider %s (%s), want %s", d.Provider, d.Why(), tt.provider)
			}
			if tt.check != nil {
				tt.check(t, cfg, d)
			}
		})
	}
}

func TestAgentCommandsRefuseBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "cron:\n  provder: chronos\n")
	tz := filepath.Join(dir, "tz.yaml")
	writeFile(t, tz, "home: "+dir+"\ntimezone: Mars/Olympus\n")
	for _, args := range [][]string{
		{"agent", "serve", "--config", filepath.Join(dir, "missing.yaml")},
		{"agent", "serve", "--config", bad},
		{"agent", "serve", "--config", tz},
		{"agent", "status", "--config", bad},
		{"agent", "serve", "--idle-exit", "-1s"},
		{"agent", "serve", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, errb.String())
		}
	}
}

func TestAgentStatusBuiltin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	writeFile(t, cfg, "home: "+filepath.Join(dir, "home")+"\n")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"agent", "status", "--config", cfg, "--json"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var st sidecar.Report
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if st.Provider != provider.Builtin || !strings.Contains(st.Why, "cron.provider is empty") || st.Running || st.InSync != nil {
		t.Fatalf("status %+v", st)
	}
	out.Reset()
	if code := run(context.Background(), []string{"agent", "status", "--config", cfg}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "provider:  builtin") || !strings.Contains(out.String(), "no fires recorded yet") {
		t.Fatalf("status:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "home")); err != nil {
		t.Fatal(err)
	}
}
