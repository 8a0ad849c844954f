package nas_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

var loadSecret = contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// baseEnv is the least environment LoadConfig accepts.
func baseEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"CHRONOS_NAS_PUBLIC_URL":    "https://nas.example.com",
		"CHRONOS_NAS_AGENTS_FILE":   "agents.yaml",
		"CHRONOS_NAS_RELAY_SECRETS": loadSecret,
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLoadConfigSecretFiles pins the *_file keys: the file's content,
// trimmed, is the secret, relative to the config file when the config file
// names it; the secret set both ways, a missing file and an empty one are
// errors naming the keys.
func TestLoadConfigSecretFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "op"), "\n  operator-token-from-a-file \n")
	writeTestFile(t, filepath.Join(dir, "store"), "redis://:s3cret@127.0.0.1:6379/0\n")
	writeTestFile(t, filepath.Join(dir, "secrets"), "# current\n"+loadSecret+"\n\n")
	writeTestFile(t, filepath.Join(dir, "empty"), " \n")
	missing := filepath.Join(dir, "missing")

	cfgPath := filepath.Join(dir, "nas.yaml")
	writeTestFile(t, cfgPath, "public_url: https://nas.example.com\nagents_file: agents.yaml\noperator_token_file: op\nstore_file: store\nrelay:\n  secrets_file: secrets\n")
	cfg, err := nas.LoadConfig(cfgPath, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OperatorToken != "operator-token-from-a-file" || cfg.Store != "redis://:s3cret@127.0.0.1:6379/0" ||
		len(cfg.Relay.Secrets) != 1 || cfg.Relay.Secrets[0] != loadSecret {
		t.Fatalf("from the files: token %q store %q secrets %q", cfg.OperatorToken, cfg.Store, cfg.Relay.Secrets)
	}

	tests := []struct {
		name string
		env  map[string]string
		want []string // substrings of the error
	}{
		{name: "operator token both ways", env: map[string]string{"CHRONOS_NAS_OPERATOR_TOKEN": "operator-token-0123456789", "CHRONOS_NAS_OPERATOR_TOKEN_FILE": filepath.Join(dir, "op")},
			want: []string{"operator_token and operator_token_file are both set"}},
		{name: "store both ways", env: map[string]string{"CHRONOS_NAS_STORE": "memory", "CHRONOS_NAS_STORE_FILE": filepath.Join(dir, "store")},
			want: []string{"store and store_file are both set"}},
		{name: "relay secrets both ways", env: map[string]string{"CHRONOS_NAS_RELAY_SECRETS_FILE": filepath.Join(dir, "secrets")},
			want: []string{"relay.secrets and relay.secrets_file are both set"}},
		{name: "missing operator token file", env: map[string]string{"CHRONOS_NAS_OPERATOR_TOKEN_FILE": missing},
			want: []string{"operator_token_file", missing}},
		{name: "missing store file", env: map[string]string{"CHRONOS_NAS_STORE_FILE": missing}, want: []string{"store_file", missing}},
		{name: "missing secrets file", env: map[string]string{"CHRONOS_NAS_RELAY_SECRETS": "", "CHRONOS_NAS_RELAY_SECRETS_FILE": missing},
			want: []string{"relay.secrets_file", missing}},
		{name: "empty operator token file", env: map[string]string{"CHRONOS_NAS_OPERATOR_TOKEN_FILE": filepath.Join(dir, "empty")},
			want: []string{"operator_token_file", "is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := nas.LoadConfig("", envOf(baseEnv(tt.env)))
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestRedactedShowsNoSecret pins the redacted view: no secret value appears
// in it, whichever way the secret came, while the other keys and the *_file
// paths stay as loaded.
func TestRedactedShowsNoSecret(t *testing.T) {
	t.Parallel()
	other := contract.FormatWebhookSecret([]byte("fedcba9876543210fedcba9876543210"))
	cfg, err := nas.LoadConfig("", envOf(baseEnv(map[string]string{
		"CHRONOS_NAS_RELAY_SECRETS":  loadSecret + "," + other,
		"CHRONOS_NAS_OPERATOR_TOKEN": "operator-token-0123456789",
		"CHRONOS_NAS_STORE":          "rediss://chronos:st0re-pa55@redis.internal:6380/2?prefix=c",
	})))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Redacted()
	if r.OperatorToken != "<redacted>" || len(r.Relay.Secrets) != 2 || r.Relay.Secrets[0] != "<redacted>" ||
		r.Store != "rediss://chronos:xxxxx@redis.internal:6380/2?prefix=c" || r.PublicURL != cfg.PublicURL {
		t.Fatalf("redacted %+v", r)
	}
	if cfg.OperatorToken != "operator-token-0123456789" || cfg.Relay.Secrets[0] != loadSecret {
		t.Fatal("Redacted changed the config it was called on")
	}
	out, err := cfg.RedactedYAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{loadSecret, other, "operator-token-0123456789", "st0re-pa55"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("secret %q printed:\n%s", secret, out)
		}
	}
	for _, want := range []string{"operator_token: <redacted> # CHRONOS_NAS_OPERATOR_TOKEN", "public_url: https://nas.example.com # CHRONOS_NAS_PUBLIC_URL"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	// A PostgreSQL URL's password, in its user info or as an option.
	for store, want := range map[string]string{
		"postgres://chronos:pg-pa55@db.internal:5432/chronos?schema=c":   "postgres://chronos:xxxxx@db.internal:5432/chronos?schema=c",
		"postgresql://db.internal/chronos?user=chronos&password=pg-pa55": "postgresql://db.internal/chronos?password=xxxxx&user=chronos",
		"postgres://db.internal/chronos?sslmode=require":                 "postgres://db.internal/chronos?sslmode=require",
	} {
		c := validConfig()
		c.Store = store
		if got := c.Redacted().Store; got != want {
			t.Errorf("store %s redacted as %s, want %s", store, got, want)
		}
	}
	// Nothing secret, nothing redacted.
	plain := validConfig().WithDefaults()
	if r := plain.Redacted(); r.OperatorToken != "" || r.Store != "memory" {
		t.Fatalf("redacted a config without secrets: %+v", r)
	}
}

// TestValidateDoesNotEchoTheStorePassword: a store setting NAS refuses is
// named in the error without the password it holds.
func TestValidateDoesNotEchoTheStorePassword(t *testing.T) {
	t.Parallel()
	for _, store := range []string{
		"mysql://u:hunter2-pass@db:5432/x",
		"postgres://u:hunter2-pass@db:5432/x?schema=Bad",
		"postgres://u@db:5432/x?password=hunter2-pass&pool_max_conns=0",
		"postgres://u:hunter2-pass@db:port/x",
	} {
		c := validConfig()
		c.Store = store
		err := c.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), "store:") || strings.Contains(err.Error(), "hunter2-pass") {
			t.Errorf("%s: error %v", store, err)
		}
	}
}

// TestValidateCredentialSource: Validate asks for an agent credential
// source; everything else is checked without one.
func TestValidateCredentialSource(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.AgentsFile = ""
	if err := c.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "agents_file or agent_jwt.jwks_url") {
		t.Fatalf("no credential source: %v", err)
	}
	c.AgentJWT = nas.AgentJWTConfig{JWKSURL: "https://id.example.com/jwks", Issuer: "https://id.example.com", Audience: "nas"}
	if err := c.WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckEnv: a CHRONOS_NAS_ variable that names no key is an error naming
// it; the config file and URL variables are not keys but known.
func TestCheckEnv(t *testing.T) {
	t.Parallel()
	if err := nas.CheckEnv([]string{"CHRONOS_NAS_CONFIG=a", "CHRONOS_NAS_URL=b", "CHRONOS_NAS_STORE_FILE=c", "CHRONOS_NAS_RELAY_SECRETS_FILE=d"}); err != nil {
		t.Fatal(err)
	}
	if err := nas.CheckEnv([]string{"CHRONOS_NAS_OPERATOR_TOKEN_FLIE=x"}); err == nil || !strings.Contains(err.Error(), "CHRONOS_NAS_OPERATOR_TOKEN_FLIE") {
		t.Fatalf("typo: %v", err)
	}
}

// TestLoadConfigRefusesZeroLimits: rate_per_second and burst written as 0,
// in the file or the environment, are refused with a message that names
// the key and the default; left out, they take the defaults.
func TestLoadConfigRefusesZeroLimits(t *testing.T) {
	t.Parallel()
	base := "public_url: https://nas.example\nagents_file: agents.yaml\noperator_token: " + strings.Repeat("o", 32) + "\nrelay:\n  secrets: [whsec_" + strings.Repeat("A", 32) + "]\n"
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"rate in the file", "limits:\n  rate_per_second: 0\n", nil, "limits.rate_per_second: must be positive (API calls per second of one agent; leave it out for the default 20), not 0"},
		{"rate as 0.0", "limits:\n  rate_per_second: 0.0\n", nil, "not 0.0"},
		{"burst in the file", "limits:\n  burst: 0\n", nil, "limits.burst: must be at least 1 (leave it out for the default 100), not 0"},
		{"rate in the environment", "", map[string]string{"CHRONOS_NAS_LIMITS_RATE_PER_SECOND": "0"}, "CHRONOS_NAS_LIMITS_RATE_PER_SECOND: must be positive"},
		{"unset", "", nil, ""},
		{"set", "limits:\n  rate_per_second: 2.5\n  burst: 3\n", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nas.yaml")
			if err := os.WriteFile(path, []byte(base+tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := nas.LoadConfig(path, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.want == "" {
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				if cfg.Limits.RatePerSecond <= 0 || cfg.Limits.Burst < 1 {
					t.Fatalf("limits %+v", cfg.Limits)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("load: %v, want %q", err, tc.want)
			}
		})
	}
}
