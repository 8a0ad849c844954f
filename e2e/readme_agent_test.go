package e2e

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/provider"
)

// TestReadmeAgentConfigLoads parses the README's agent.yaml with the agent's
// strict config parser: an unknown key fails.
func TestReadmeAgentConfigLoads(t *testing.T) {
	t.Parallel()
	cfg, err := provider.ParseConfig([]byte(yamlFile(t, readmeBlocks(t), "agent.yaml")))
	if err != nil {
		t.Fatalf("README agent.yaml: %v", err)
	}
	if cfg.Cron.Provider != provider.Chronos || cfg.Cron.Chronos.AccessTokenFile == "" {
		t.Errorf("README agent.yaml parsed as %+v", cfg)
	}
	// Without the token file read, the only thing missing is the token.
	for _, r := range provider.Decide(cfg).Reasons {
		for _, k := range []string{"portal_url", "callback_url", "nas_jwks_url", "expected_audience", "cron.provider"} {
			if strings.Contains(r, k) {
				t.Errorf("README agent.yaml: the provider decision says %q", r)
			}
		}
	}
}

// yamlKeys lists the dotted YAML keys of a config struct's leaves.
func yamlKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		if t.Field(i).Type.Kind() == reflect.Struct {
			out = append(out, yamlKeys(t.Field(i).Type, prefix+tag+".")...)
			continue
		}
		out = append(out, prefix+tag)
	}
	return out
}

// TestReadmeAgentConfigTableMatchesTheCode checks the README's agent
// configuration reference against the config struct: every key documented,
// none that does not exist, each with the environment variable the agent
// reads, and the listen default equal to the code's.
func TestReadmeAgentConfigTableMatchesTheCode(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "### Agent configuration reference")
	if !ok {
		t.Fatal("README.md has no agent configuration reference")
	}
	section, _, _ = strings.Cut(section, "\n#")
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| `([A-Z_]+)` \\| ([^|]+) \\|")
	documented := map[string][2]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = [2]string{m[2], strings.TrimSpace(m[3])}
	}
	keys := yamlKeys(reflect.TypeOf(provider.Config{}), "")
	env := provider.EnvNames()
	for _, k := range keys {
		d, ok := documented[k]
		if !ok {
			t.Errorf("README: agent config key %s is not documented", k)
			continue
		}
		if !slices.Contains(env, d[0]) {
			t.Errorf("README: %s is documented with %s, which the agent does not read", k, d[0])
		}
		if want := "CHRONOS_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_")); d[0] != want {
			t.Errorf("README: %s is documented with %s, want %s", k, d[0], want)
		}
	}
	for k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("README documents agent config key %s, which the code does not have", k)
		}
	}
	if got := documented["listen"][1]; got != "`"+provider.DefaultListen+"`" {
		t.Errorf("README: listen defaults to %s, the code says %s", got, provider.DefaultListen)
	}
	if !slices.Contains(env, provider.EnvAccessToken) || !strings.Contains(section, provider.EnvAccessToken) {
		t.Errorf("README: the access token variable %s is not documented", provider.EnvAccessToken)
	}
}
