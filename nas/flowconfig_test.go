package nas_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/nas"
)

// TestPerAgentConfig pins relay.per_agent.* and relay.misfire_grace from
// the file and the environment: their defaults, the values that reach every
// dispatcher (RelayConfig.Dispatch), and the values refused with a message
// naming the key.
func TestPerAgentConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		file string // YAML after the base keys; "" reads the environment only
		env  map[string]string
		// want: the dispatch settings; wantErr: substrings of the error.
		parallelism int
		rate        float64
		grace       time.Duration
		wantErr     []string
	}{
		{name: "defaults", parallelism: 4, rate: 0, grace: 24 * time.Hour},
		{name: "grace follows max_age", env: map[string]string{"CHRONOS_NAS_RELAY_RETRY_MAX_AGE": "2h"},
			parallelism: 4, grace: 2 * time.Hour},
		{name: "from the environment", env: map[string]string{
			"CHRONOS_NAS_RELAY_PER_AGENT_PARALLELISM": "2", "CHRONOS_NAS_RELAY_PER_AGENT_RATE": "0.5", "CHRONOS_NAS_RELAY_MISFIRE_GRACE": "15m",
		}, parallelism: 2, rate: 0.5, grace: 15 * time.Minute},
		{name: "from the file", file: "  per_agent:\n    parallelism: 1\n    rate: 10\n  misfire_grace: 1h\n",
			parallelism: 1, rate: 10, grace: time.Hour},
		{name: "zero parallelism", env: map[string]string{"CHRONOS_NAS_RELAY_PER_AGENT_PARALLELISM": "0"},
			wantErr: []string{"relay.per_agent.parallelism:", "at least 1"}},
		{name: "negative parallelism", file: "  per_agent:\n    parallelism: -3\n",
			wantErr: []string{"relay.per_agent.parallelism:", "-3"}},
		{name: "parallelism not a number", env: map[string]string{"CHRONOS_NAS_RELAY_PER_AGENT_PARALLELISM": "four"},
			wantErr: []string{"CHRONOS_NAS_RELAY_PER_AGENT_PARALLELISM (relay.per_agent.parallelism)"}},
		{name: "rate zero", env: map[string]string{"CHRONOS_NAS_RELAY_PER_AGENT_RATE": "0"},
			wantErr: []string{"relay.per_agent.rate:", "positive"}},
		{name: "rate negative", file: "  per_agent:\n    rate: -1\n",
			wantErr: []string{"relay.per_agent.rate:", "positive"}},
		{name: "rate infinite", env: map[string]string{"CHRONOS_NAS_RELAY_PER_AGENT_RATE": "+Inf"},
			wantErr: []string{"relay.per_agent.rate:"}},
		{name: "misfire grace negative", env: map[string]string{"CHRONOS_NAS_RELAY_MISFIRE_GRACE": "-1m"},
			wantErr: []string{"relay.misfire_grace:", "negative"}},
		{name: "misfire grace not a duration", env: map[string]string{"CHRONOS_NAS_RELAY_MISFIRE_GRACE": "a day"},
			wantErr: []string{"CHRONOS_NAS_RELAY_MISFIRE_GRACE (relay.misfire_grace)"}},
		{name: "misfire grace without unit in the file", file: "  misfire_grace: 30\n",
			wantErr: []string{"line 2", "time.Duration"}},
		{name: "unknown per_agent key", file: "  per_agent:\n    burst: 3\n",
			wantErr: []string{"burst"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			env := baseEnv(tt.env)
			if tt.file != "" {
				path = filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
				writeTestFile(t, path, "relay:\n"+tt.file)
			}
			cfg, err := nas.LoadConfig(path, envOf(env))
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("accepted: %+v", cfg.Relay)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d := cfg.Relay.Dispatch()
			if d.PerAgent != tt.parallelism || d.PerAgentRate != tt.rate || d.MisfireGrace != tt.grace {
				t.Fatalf("dispatch PerAgent %d PerAgentRate %v MisfireGrace %s, want %d %v %s",
					d.PerAgent, d.PerAgentRate, d.MisfireGrace, tt.parallelism, tt.rate, tt.grace)
			}
			if p := cfg.Relay.Retry.Policy(); d.Retry.MaxAttempts != p.MaxAttempts || d.Retry.MaxAge != p.MaxAge || d.Retry.Base != p.Base {
				t.Fatalf("dispatch retry %+v, want %+v", d.Retry, p)
			}
			if f := cfg.Relay.Flow(); f.Parallelism != tt.parallelism || f.Rate != tt.rate {
				t.Fatalf("flow %+v", f)
			}
		})
	}
}

// TestPerAgentPrintConfig: print-config shows the per-agent keys with their
// variables, the rate as null while unset.
func TestPerAgentPrintConfig(t *testing.T) {
	t.Parallel()
	cfg, err := nas.LoadConfig("", envOf(baseEnv(nil)))
	if err != nil {
		t.Fatal(err)
	}
	out, err := cfg.RedactedYAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  per_agent:\n",
		"    parallelism: 4 # CHRONOS_NAS_RELAY_PER_AGENT_PARALLELISM\n",
		"    rate: null # CHRONOS_NAS_RELAY_PER_AGENT_RATE\n",
		"  misfire_grace: 24h0m0s # CHRONOS_NAS_RELAY_MISFIRE_GRACE\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("print-config lacks %q:\n%s", want, out)
		}
	}
	rate := 2.5
	cfg.Relay.PerAgent.Rate = &rate
	if out, _ := cfg.RedactedYAML(); !strings.Contains(string(out), "    rate: 2.5 # CHRONOS_NAS_RELAY_PER_AGENT_RATE\n") {
		t.Errorf("a set rate is not printed:\n%s", out)
	}
}
