package provider_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/provider"
)

func TestChainsConfigFromYAMLAndEnvironment(t *testing.T) {
	c, err := provider.ParseConfig([]byte(`
home: /h
listen: 127.0.0.1:1
chains:
  notify: ["file:/var/log/chain-alerts.jsonl"]
  classes:
    disk:
      max_depth: 3
      max_retries: 0
      lifetime: 30m
      breaker_cooldown: 5m
      notify: ["command:/usr/local/bin/page"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cc := c.ChainConfig()
	disk := cc.Policy("disk")
	if disk.Limits.MaxDepth != 3 || disk.Limits.MaxRetries != 0 || disk.Limits.Lifetime.Std() != 30*time.Minute ||
		disk.BreakerCooldown != 5*time.Minute || disk.Limits.MaxChildren != chain.DefaultMaxChildren || disk.BreakerWindow != chain.DefaultBreakerWindow {
		t.Fatalf("disk policy %+v", disk)
	}
	if other := cc.Policy("other"); other.Limits != chain.DefaultLimits() || other.SpawnStorm != chain.DefaultSpawnStorm {
		t.Fatalf("default policy %+v", other)
	}
	if len(cc.Notify) != 1 || len(cc.Classes["disk"].Notify) != 1 {
		t.Fatalf("targets %+v", cc)
	}
	env := map[string]string{"CHRONOS_CHAINS_CLASSES": `{"web":{"max_children":5,"spawn_storm":2}}`}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if p := c.ChainConfig().Policy("web"); p.Limits.MaxChildren != 5 || p.SpawnStorm != 2 {
		t.Fatalf("web policy from the environment %+v", p)
	}
}

func TestChainsConfigRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"chains:\n  classes:\n    disk:\n      lifetime: soon\n", "lifetime"},
		{"chains:\n  classes:\n    disk:\n      max_depth: -1\n", "negative"},
		{"chains:\n  classes:\n    disk:\n      breaker_window: 10ms\n", "breaker_window"},
		{"chains:\n  classes:\n    a.b:\n      max_depth: 2\n", "a.b"},
		{"chains:\n  notify: [\"pager\"]\n", "chains.notify"},
		{"chains:\n  classes:\n    disk:\n      max_dept: 2\n", "max_dept"},
	} {
		c, err := provider.ParseConfig([]byte("home: /h\nlisten: 127.0.0.1:1\n" + tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s", tc.yaml, err, tc.want)
		}
	}
	var c provider.Config
	if err := c.ApplyEnv(func(k string) (string, bool) { return `{"disk":{"nope":1}}`, k == "CHRONOS_CHAINS_CLASSES" }); err == nil || !strings.Contains(err.Error(), "CHRONOS_CHAINS_CLASSES") {
		t.Errorf("bad environment: %v", err)
	}
}
