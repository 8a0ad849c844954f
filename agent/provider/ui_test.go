package provider_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/provider"
)

func TestUIListenDefaultsAndOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name    string
		yaml    string
		env     map[string]string
		want    string
		enabled bool
	}{
		{"missing key: default", "home: h\n", nil, provider.DefaultUIListen, true},
		{"empty in the file disables", "home: h\nui_listen: \"\"\n", nil, "", false},
		{"off disables", "home: h\nui_listen: off\n", nil, "off", false},
		{"set", "home: h\nui_listen: 127.0.0.1:9999\n", nil, "127.0.0.1:9999", true},
		{"empty in the environment disables", "home: h\n", map[string]string{"CHRONOS_UI_LISTEN": ""}, "", false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, strings.Repeat("c", i+1)+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, _, err := provider.LoadConfig(path, envMap(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.UIListen != tc.want || cfg.UIEnabled() != tc.enabled {
				t.Fatalf("ui_listen %q enabled %v", cfg.UIListen, cfg.UIEnabled())
			}
		})
	}
}

func TestUIListenNotLoopbackNeedsTokenFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		listen, tokenFile string
		ok                bool
	}{
		{"127.0.0.1:8788", "", true},
		{"localhost:8788", "", true},
		{"[::1]:8788", "", true},
		{"0.0.0.0:8788", "", false},
		{":8788", "", false},
		{"192.168.1.4:8788", "", false},
		{"0.0.0.0:8788", "/etc/chronos/ui-token", true},
		{"no-port", "", false},
		{"off", "", true},
	}
	for _, tc := range tests {
		c := provider.Config{Home: "/h", Listen: ":1", UIListen: tc.listen, UITokenFile: tc.tokenFile}
		err := c.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "ui_")) {
			t.Errorf("%q token file %q: %v", tc.listen, tc.tokenFile, err)
		}
	}
}

// TestUIHosts: ui_hosts takes host names and IP addresses, from the file
// or the environment (comma separated), and refuses anything else with the
// key and the entry.
func TestUIHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hosts []string
		ok    bool
	}{
		{nil, true},
		{[]string{"chronos.internal", "agent-1.lan.", "LOCALHOST", "192.168.1.4", "::1", "[fd00::8]"}, true},
		{[]string{"http://chronos.internal"}, false},
		{[]string{"chronos.internal:8788"}, false},
		{[]string{"*.example.com"}, false},
		{[]string{"chronos.internal/ui"}, false},
		{[]string{""}, false},
		{[]string{"-bad.example"}, false},
		{[]string{"a..b"}, false},
		{[]string{"[127.0.0.1]"}, false},
		{[]string{"[::1"}, false},
		{[]string{"fe80::1%eth0"}, false},
		{[]string{strings.Repeat("a", 64) + ".example"}, false},
	} {
		c := provider.Config{Home: "/h", Listen: ":1", UIListen: provider.DefaultUIListen, UIHosts: tc.hosts}
		err := c.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "ui_hosts")) {
			t.Errorf("ui_hosts %q: %v", tc.hosts, err)
		}
	}
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte("home: h\nui_hosts: [chronos.internal]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := provider.LoadConfig(path, envMap(nil))
	if err != nil || len(cfg.UIHosts) != 1 || cfg.UIHosts[0] != "chronos.internal" {
		t.Fatalf("from the file: %q %v", cfg.UIHosts, err)
	}
	cfg, _, err = provider.LoadConfig(path, envMap(map[string]string{"CHRONOS_UI_HOSTS": "a.lan, b.lan"}))
	if err != nil || strings.Join(cfg.UIHosts, " ") != "a.lan b.lan" {
		t.Fatalf("from the environment: %q %v", cfg.UIHosts, err)
	}
	if _, _, err := provider.LoadConfig(path, envMap(map[string]string{"CHRONOS_UI_HOSTS": "a.lan:80"})); err == nil || !strings.Contains(err.Error(), "ui_hosts") {
		t.Fatalf("a port in ui_hosts: %v", err)
	}
}

func TestServingRecordKeepsTheUI(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	if err := provider.WriteServing(home, provider.Serving{PID: 42, StartedAt: now, UI: "http://127.0.0.1:8788", UITokenFile: "tok"}); err != nil {
		t.Fatal(err)
	}
	rec, ok, err := provider.ReadServing(home)
	if err != nil || !ok || rec.UI != "http://127.0.0.1:8788" || rec.Config != "" || !filepath.IsAbs(rec.UITokenFile) || rec.PID != 42 {
		t.Fatalf("record %+v %v %v", rec, ok, err)
	}
	// Neither a config nor a UI: no record.
	if err := provider.WriteServing(home, provider.Serving{PID: 42}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := provider.ReadServing(home); ok || err != nil {
		t.Fatalf("record left: %v %v", ok, err)
	}
}
