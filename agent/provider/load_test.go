package provider_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/provider"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestLoadConfigPathsRelativeToTheFile pins that every relative path in
// agent.yaml is read next to the file, while a path from the environment
// keeps the working directory.
func TestLoadConfigPathsRelativeToTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte("home: state/home\ncron:\n  chronos:\n    access_token_file: secret/token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret", "token"), []byte(" tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := provider.LoadConfig(cfgPath, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Home != filepath.Join(dir, "state", "home") || cfg.Cron.Chronos.AccessToken != "tok-123" ||
		cfg.Cron.Chronos.AccessTokenFile != filepath.Join(dir, "secret", "token") {
		t.Fatalf("home %q token file %q token %q", cfg.Home, cfg.Cron.Chronos.AccessTokenFile, cfg.Cron.Chronos.AccessToken)
	}
	// The file named by the environment is read the same way.
	cfg, _, err = provider.LoadConfig("", envMap(map[string]string{provider.EnvConfigFile: cfgPath}))
	if err != nil || cfg.Home != filepath.Join(dir, "state", "home") {
		t.Fatalf("home %q (%v)", cfg.Home, err)
	}
	// An environment path is not moved next to the config file.
	cfg, _, err = provider.LoadConfig(cfgPath, envMap(map[string]string{"CHRONOS_HOME": "rel/home", "CHRONOS_CRON_CHRONOS_ACCESS_TOKEN_FILE": "rel/token"}))
	if err != nil || cfg.Home != "rel/home" || cfg.Cron.Chronos.AccessTokenFile != "rel/token" {
		t.Fatalf("home %q token file %q (%v)", cfg.Home, cfg.Cron.Chronos.AccessTokenFile, err)
	}
	// An absolute path stays.
	if err := os.WriteFile(cfgPath, []byte("home: "+filepath.Join(dir, "abs")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, _, err = provider.LoadConfig(cfgPath, envMap(nil)); err != nil || cfg.Home != filepath.Join(dir, "abs") {
		t.Fatalf("home %q (%v)", cfg.Home, err)
	}
}

// TestLoadConfigBadInput: a missing file, an unknown key and an invalid
// setting are errors naming the problem; a provider that cannot be used is
// a decision, not an error.
func TestLoadConfigBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct{ name, yaml, want string }{
		{name: "unknown key", yaml: "hom: x\n", want: "hom"},
		{name: "bad zone", yaml: "home: h\ntimezone: Mars/Olympus\n", want: "Mars/Olympus"},
		{name: "bad resync", yaml: "home: h\ncron:\n  chronos:\n    resync_interval: often\n", want: "resync_interval"},
		{name: "bad delivery", yaml: "home: h\ncron:\n  chronos:\n    delivery: carrier-pigeon\n", want: `cron.chronos.delivery "carrier-pigeon" is not a delivery mode (want "direct" or "nas")`},
		{name: "bad notify prefix", yaml: "home: h\nnotify:\n  allow: [10.0.0.0/33]\n", want: "notify.allow"},
		{name: "bad allow_private", yaml: "home: h\nnotify:\n  allow_private: sometimes\n", want: "allow_private"},
	}
	for _, tt := range tests {
		path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := provider.LoadConfig(path, envMap(nil)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v does not name %q", tt.name, err, tt.want)
		}
	}
	if _, _, err := provider.LoadConfig(filepath.Join(dir, "missing.yaml"), envMap(nil)); err == nil {
		t.Error("a missing file loaded")
	}
	_, d, err := provider.LoadConfig("", envMap(map[string]string{"CHRONOS_HOME": dir, "CHRONOS_CRON_PROVIDER": "chronos"}))
	if err != nil || d.Chronos() || !strings.Contains(d.Why(), "portal_url is missing") {
		t.Fatalf("decision %+v (%v)", d, err)
	}
}

// TestLoadConfigDelivery: cron.chronos.delivery is nas by default, direct
// or nas when set (in the file or the environment), and refused otherwise.
func TestLoadConfigDelivery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(path, []byte("home: h\ncron:\n  chronos:\n    delivery: direct\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		env  map[string]string
		want string
		err  bool
	}{
		{name: "default", env: map[string]string{"CHRONOS_HOME": dir}, want: "nas"},
		{name: "file", path: path, want: "direct"},
		{name: "env wins", path: path, env: map[string]string{"CHRONOS_CRON_CHRONOS_DELIVERY": "nas"}, want: "nas"},
		{name: "env direct", env: map[string]string{"CHRONOS_HOME": dir, "CHRONOS_CRON_CHRONOS_DELIVERY": "direct"}, want: "direct"},
		{name: "unknown", env: map[string]string{"CHRONOS_HOME": dir, "CHRONOS_CRON_CHRONOS_DELIVERY": "Direct"}, err: true},
	}
	for _, tt := range tests {
		cfg, _, err := provider.LoadConfig(tt.path, envMap(tt.env))
		if tt.err {
			if err == nil || !strings.Contains(err.Error(), "cron.chronos.delivery") {
				t.Errorf("%s: error %v, want one naming cron.chronos.delivery", tt.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got, err := cfg.Cron.Chronos.DeliveryMode()
		if err != nil || got != tt.want || cfg.Cron.Chronos.Direct() != (tt.want == "direct") {
			t.Errorf("%s: delivery %q (%v), want %q", tt.name, got, err, tt.want)
		}
	}
}
