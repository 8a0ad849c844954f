package nas_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay/cronkey"
	"github.com/chronoscron/chronos/relay/memory"
)

// writeEncryptionKey writes a fresh cron key encryption key with mode perm.
func writeEncryptionKey(t *testing.T, dir, name string, perm os.FileMode) string {
	t.Helper()
	text, err := cronkey.GenerateEncryptionKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

// TestAgentsFileDelivery: delivery is nas, direct or left out; any other
// value, or entries of one agent that disagree, refuse the file with an
// error naming the entry and the value; the policy says which agents may
// use direct delivery.
func TestAgentsFileDelivery(t *testing.T) {
	t.Parallel()
	h1, h2, h3 := nas.TokenSHA256("1"), nas.TokenSHA256("2"), nas.TokenSHA256("3")
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"unknown mode", "- {agent_id: a, instance_id: i, token_sha256: " + h1 + ", delivery: relay}", []string{"entry 0 (a)", `delivery "relay"`, "nas or direct"}},
		{"upper case", "- {agent_id: a, instance_id: i, token_sha256: " + h1 + ", delivery: Direct}", []string{`delivery "Direct"`}},
		{"not a string", "- {agent_id: a, instance_id: i, token_sha256: " + h1 + ", delivery: [direct]}", []string{"agents file"}},
		{"entries disagree", "- {agent_id: a, instance_id: i, token_sha256: " + h1 + ", delivery: direct}\n- {agent_id: a, instance_id: j, token_sha256: " + h2 + "}",
			[]string{"entry 1 (a)", "delivery differs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := nas.ParseAgents([]byte(tc.file))
			if err == nil {
				t.Fatal("parsed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			// The same refusal when NAS opens the file at start.
			path := filepath.Join(t.TempDir(), "agents.yaml")
			writeTestFile(t, path, tc.file)
			if _, err := nas.OpenAgentsFile(path, time.Second); err == nil {
				t.Fatal("OpenAgentsFile accepted the file")
			}
		})
	}
	entries, err := nas.ParseAgents([]byte("- {agent_id: a, instance_id: i, token_sha256: " + h1 + ", delivery: direct}\n" +
		"- {agent_id: a, instance_id: j, token_sha256: " + h2 + ", delivery: direct}\n" +
		"- {agent_id: b, instance_id: k, token_sha256: " + h3 + ", delivery: nas}\n" +
		"- {agent_id: c, instance_id: l, session_id: s-1}"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := nas.NewStaticAgents(entries)
	if err != nil {
		t.Fatal(err)
	}
	policies, _ := f.AgentPolicies()
	if !policies["a"].Direct || policies["b"].Direct || policies["c"].Direct {
		t.Fatalf("direct policies %+v", policies)
	}
}

// TestLoadConfigCronKeySettings: relay.cron_key_encryption_key_file is read
// at load (relative to the config file), and a missing, malformed or
// group- or world-readable file is refused naming the key; cron_key_max_age
// defaults to 720h and must be positive.
func TestLoadConfigCronKeySettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeEncryptionKey(t, dir, "good.key", 0o600)
	open := writeEncryptionKey(t, dir, "open.key", 0o644)
	bad := filepath.Join(dir, "bad.key")
	writeTestFile(t, bad, "not a key\n")

	cfgPath := filepath.Join(dir, "nas.yaml")
	writeTestFile(t, cfgPath, "public_url: https://nas.example.com\nagents_file: agents.yaml\nrelay:\n  secrets: ["+loadSecret+"]\n  cron_key_encryption_key_file: good.key\n")
	cfg, err := nas.LoadConfig(cfgPath, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Relay.CronKeyEncryptionKeyFile != good || cfg.Relay.CronKeyMaxAge != 720*time.Hour {
		t.Fatalf("key file %q, max age %s", cfg.Relay.CronKeyEncryptionKeyFile, cfg.Relay.CronKeyMaxAge)
	}
	sealer, err := cfg.CronKeySealer()
	if err != nil || sealer == nil {
		t.Fatalf("sealer %v (%v)", sealer, err)
	}
	want, err := cronkey.LoadSealer(good)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := cronkey.Mint()
	sealed, _ := sealer.Seal("a", "j", k)
	if got, err := want.Open("a", "j", sealed); err != nil || got.ID != k.ID {
		t.Fatalf("the loaded sealer is not the file's key: %v", err)
	}
	out, err := cfg.RedactedYAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "cron_key_encryption_key_file: "+good) || !strings.Contains(string(out), "cron_key_max_age: 720h") {
		t.Fatalf("print-config does not show the cron key settings:\n%s", out)
	}

	noKey, err := nas.LoadConfig("", envOf(baseEnv(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := noKey.CronKeySealer(); s != nil || err != nil {
		t.Fatalf("without the key file: sealer %v (%v)", s, err)
	}

	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"missing file", map[string]string{"CHRONOS_NAS_RELAY_CRON_KEY_ENCRYPTION_KEY_FILE": filepath.Join(dir, "missing")},
			[]string{"relay.cron_key_encryption_key_file", "missing"}},
		{"not a key", map[string]string{"CHRONOS_NAS_RELAY_CRON_KEY_ENCRYPTION_KEY_FILE": bad},
			[]string{"relay.cron_key_encryption_key_file", "not 32 bytes"}},
		{"zero max age", map[string]string{"CHRONOS_NAS_RELAY_CRON_KEY_MAX_AGE": "0"}, []string{"CRON_KEY_MAX_AGE", "must be positive"}},
		{"zero max age as a duration", map[string]string{"CHRONOS_NAS_RELAY_CRON_KEY_MAX_AGE": "0s"}, []string{"CRON_KEY_MAX_AGE", "must be positive"}},
		{"negative max age", map[string]string{"CHRONOS_NAS_RELAY_CRON_KEY_MAX_AGE": "-1h"}, []string{"relay.cron_key_max_age", "must be positive"}},
	}
	if runtime.GOOS != "windows" {
		tests = append(tests, struct {
			name string
			env  map[string]string
			want []string
		}{"open permissions", map[string]string{"CHRONOS_NAS_RELAY_CRON_KEY_ENCRYPTION_KEY_FILE": open},
			[]string{"relay.cron_key_encryption_key_file", "readable by group or others", "chmod 600"}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := nas.LoadConfig("", envOf(baseEnv(tc.env)))
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// A zero in the file is refused too.
	zero := filepath.Join(dir, "zero.yaml")
	writeTestFile(t, zero, "public_url: https://nas.example.com\nagents_file: agents.yaml\nrelay:\n  secrets: ["+loadSecret+"]\n  cron_key_max_age: 0s\n")
	if _, err := nas.LoadConfig(zero, envOf(nil)); err == nil || !strings.Contains(err.Error(), "relay.cron_key_max_age") {
		t.Fatalf("cron_key_max_age: 0s in the file: %v", err)
	}
}

// TestNewRefusesDirectAgentsWithoutEncryptionKey: NAS does not start when
// its agents file allows an agent direct delivery but no encryption key is
// configured, nor with a key file others may read; with the key, or with
// no direct agent, it starts.
func TestNewRefusesDirectAgentsWithoutEncryptionKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeEncryptionKey(t, dir, "good.key", 0o600)
	open := writeEncryptionKey(t, dir, "open.key", 0o644)
	direct := []nas.AgentEntry{
		{AgentID: "plain", InstanceID: "i1", TokenSHA256: nas.TokenSHA256("1")},
		{AgentID: "fast", InstanceID: "i2", TokenSHA256: nas.TokenSHA256("2"), Delivery: "direct"},
	}
	mediated := []nas.AgentEntry{{AgentID: "plain", InstanceID: "i1", TokenSHA256: nas.TokenSHA256("1"), Delivery: "nas"}}
	for _, tc := range []struct {
		name    string
		entries []nas.AgentEntry
		keyFile string
		want    []string // substrings of the error; none: New succeeds
	}{
		{"direct agent without a key", direct, "", []string{"relay.cron_key_encryption_key_file", "required", "agent fast", "delivery: direct", "head -c 32 /dev/urandom"}},
		{"direct agent, key file missing", direct, filepath.Join(dir, "missing"), []string{"relay.cron_key_encryption_key_file", "missing"}},
		{"direct agent, open key file", direct, open, []string{"relay.cron_key_encryption_key_file", "readable by group or others"}},
		{"direct agent with a key", direct, good, nil},
		{"no direct agent, no key", mediated, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if runtime.GOOS == "windows" && tc.keyFile == open {
				t.Skip("no permission bits")
			}
			eng := memory.New(memory.Options{})
			t.Cleanup(func() { _ = eng.Close() })
			ring, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
			if err != nil {
				t.Fatal(err)
			}
			agents, err := nas.NewStaticAgents(tc.entries)
			if err != nil {
				t.Fatal(err)
			}
			cfg := nas.Config{PublicURL: "https://nas.example.com", Relay: nas.RelayConfig{Secrets: []string{loadSecret}, CronKeyEncryptionKeyFile: tc.keyFile}}
			svc, err := nas.New(nas.Options{Config: cfg, Engine: eng, Verifier: agents, Keys: ring, Logger: slog.New(slog.DiscardHandler)})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				svc.Close()
				return
			}
			if err == nil {
				svc.Close()
				t.Fatal("New started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
