package provider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loadFile is a Loader for these tests: the file's home and timezone lines.
func loadFile(path string, lookup func(string) (string, bool)) (Config, Decision, error) {
	var c Config
	if path == "" {
		path, _ = lookup(EnvConfig)
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return c, Decision{}, err
		}
		if c, err = ParseConfig(data); err != nil {
			return c, Decision{}, err
		}
	}
	c.ApplyEnv(lookup)
	return c, Decide(c), nil
}

// TestResolveTargetUsesServingRecord: with --home alone, the config the
// home records as serving it gives the zone; a record of a config for
// another home, or none, leaves the target without a config.
func TestResolveTargetUsesServingRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	home, other := filepath.Join(dir, "home"), filepath.Join(dir, "other")
	for _, d := range []string{home, other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfg, []byte("home: "+home+"\nlisten: 127.0.0.1:1\ntimezone: Europe/Paris\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := func(string) (string, bool) { return "", false }
	resolve := func(h string) Target {
		t.Helper()
		tg, err := ResolveTarget(TargetOptions{Home: h, Lookup: none, Load: loadFile})
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	if tg := resolve(home); tg.ConfigPath != "" || tg.Location.String() != "UTC" {
		t.Fatalf("no record: %+v", tg)
	}
	if err := RecordServing(home, cfg, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := RecordServing(other, cfg, time.Now()); err != nil {
		t.Fatal(err)
	}
	if tg := resolve(home); tg.ConfigPath != cfg || tg.Location.String() != "Europe/Paris" || tg.Home != home {
		t.Fatalf("recorded: %+v", tg)
	}
	if tg := resolve(other); tg.ConfigPath != "" || tg.Location.String() != "UTC" {
		t.Fatalf("a record naming a config of another home was used: %+v", tg)
	}
	if err := RecordServing(home, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadServing(home); ok || err != nil {
		t.Fatalf("record not removed: %v %v", ok, err)
	}
}

// TestArmChangeWithoutConfig: with no config known, a running agent of the
// home is named; a stopped one, or none, leaves nothing to arm the change.
func TestArmChangeWithoutConfig(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	ctx := context.Background()
	rep, err := ArmChange(ctx, Target{Home: home}, nil)
	if err != nil || rep.How != ArmNone || !strings.Contains(rep.Describe(home, nil), "until the agent next starts") {
		t.Fatalf("no agent: %+v %v", rep, err)
	}
	if err := UpdateState(ctx, home, func(s *State) { s.Agent = &AgentState{PID: os.Getpid(), StartedAt: time.Now()} }); err != nil {
		t.Fatal(err)
	}
	if rep, _ = ArmChange(ctx, Target{Home: home}, nil); rep.How != ArmRunning || !strings.Contains(rep.Describe(home, nil), "within a second") {
		t.Fatalf("running agent: %+v", rep)
	}
	stopped := time.Now()
	if err := UpdateState(ctx, home, func(s *State) { s.Agent.StoppedAt = &stopped }); err != nil {
		t.Fatal(err)
	}
	if rep, _ = ArmChange(ctx, Target{Home: home}, nil); rep.How != ArmNone {
		t.Fatalf("stopped agent: %+v", rep)
	}
}
