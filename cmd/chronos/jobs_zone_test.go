package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/provider"
)

// TestResolveTarget pins where the jobs CLI finds its home and the zone of
// jobs that name none: --home, $CHRONOS_HOME, the agent config's home, then
// ~/.chronos; the agent's configured zone, else UTC.
func TestResolveTarget(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	agentHome := filepath.Join(dir, "agent-home")
	cfgPath := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte("home: "+agentHome+"\ntimezone: Asia/Tokyo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noZoneCfg := filepath.Join(dir, "nozone.yaml")
	if err := os.WriteFile(noZoneCfg, []byte("home: "+agentHome+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	userHome, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no user home directory")
	}
	cases := []struct {
		name     string
		flag     string
		env      map[string]string
		wantHome string
		wantZone string
	}{
		{"nothing set", "", nil, filepath.Join(userHome, ".chronos"), "UTC"},
		{"CHRONOS_HOME", "", map[string]string{envHome: other}, other, "UTC"},
		{"CHRONOS_TIMEZONE alone", "", map[string]string{"CHRONOS_TIMEZONE": "Europe/Paris"}, filepath.Join(userHome, ".chronos"), "Europe/Paris"},
		{"agent config names home and zone", "", map[string]string{envAgentConfig: cfgPath}, agentHome, "Asia/Tokyo"},
		{"--home is the agent's home", agentHome, map[string]string{envAgentConfig: cfgPath}, agentHome, "Asia/Tokyo"},
		{"environment zone wins over the file", "", map[string]string{envAgentConfig: cfgPath, "CHRONOS_TIMEZONE": "America/New_York"}, agentHome, "America/New_York"},
		{"config without zone", "", map[string]string{envAgentConfig: noZoneCfg}, agentHome, "UTC"},
		{"--home of another agent ignores the config", other, map[string]string{envAgentConfig: cfgPath}, other, "UTC"},
		{"--home wins over CHRONOS_HOME", other, map[string]string{envHome: agentHome}, other, "UTC"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lookup := func(k string) (string, bool) {
				v, ok := tc.env[k]
				return v, ok
			}
			tg, err := provider.ResolveTarget(provider.TargetOptions{Home: tc.flag, Lookup: lookup, Load: loadAgentConfig})
			if err != nil {
				t.Fatal(err)
			}
			home, loc := tg.Home, tg.Location
			if home != tc.wantHome || loc.String() != tc.wantZone {
				t.Errorf("got home %q zone %q, want %q %q", home, loc, tc.wantHome, tc.wantZone)
			}
		})
	}
}

// TestJobsAddUsesAgentZone adds a job without --tz while the agent config
// names a zone: the job records that zone, not UTC.
func TestJobsAddUsesAgentZone(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	cfgPath := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte("home: "+home+"\ntimezone: Europe/Berlin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envAgentConfig, cfgPath)
	t.Setenv(envHome, "")
	os.Unsetenv(envHome)
	t.Setenv("CHRONOS_TIMEZONE", "")
	os.Unsetenv("CHRONOS_TIMEZONE")

	mustCLI(t, "jobs", "add", "--id", "berlin", "--schedule", "0 9 * * *", "--", "true")
	mustCLI(t, "jobs", "add", "--id", "explicit", "--tz", "UTC", "--schedule", "0 9 * * *", "--", "true")
	for id, zone := range map[string]string{"berlin": "Europe/Berlin", "explicit": "UTC"} {
		var j agent.JobView
		if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, id, "--json")), &j); err != nil {
			t.Fatal(err)
		}
		if j.Timezone != zone {
			t.Errorf("job %s: timezone %q, want %q", id, j.Timezone, zone)
		}
	}

	t.Setenv("CHRONOS_TIMEZONE", "Mars/Olympus")
	code, out, errOut := cli(t, "jobs", "add", "--id", "mars", "--schedule", "@daily", "--", "true")
	if code != exitUsage || out != "" {
		t.Fatalf("bad CHRONOS_TIMEZONE: exit %d stdout %q stderr %q", code, out, errOut)
	}
}

// TestJobsShowTimesInTheJobsZone pins that list, show and resume print a
// zoned job's times in its zone, as jobs add does.
func TestJobsShowTimesInTheJobsZone(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	out := mustCLI(t, "jobs", "add", "--home", home, "--id", "paris", "--tz", "Europe/Paris", "--schedule", "0 9 * * *", "--", "true")
	if !strings.Contains(out, "T09:00:00+0") {
		t.Fatalf("add output not in the job's zone:\n%s", out)
	}
	for _, args := range [][]string{
		{"jobs", "list", "--home", home},
		{"jobs", "show", "--home", home, "paris"},
		{"jobs", "resume", "--home", home, "paris"},
	} {
		if out := mustCLI(t, args...); !strings.Contains(out, "T09:00:00+0") {
			t.Errorf("%s: next fire not shown at 09:00 Paris time:\n%s", strings.Join(args[:2], " "), out)
		}
	}
}

// TestJobsJSONKeysAlwaysPresent pins the keys of a job in --json output: a
// new job that never ran still has name, paused_reason, last_run_at,
// last_status, last_error and finished_at, empty or null.
func TestJobsJSONKeysAlwaysPresent(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "fresh", "--schedule", "@daily", "--", "true")
	var list []map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "list", "--home", home, "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("list %v", list)
	}
	for _, k := range []string{"id", "name", "schedule", "kind", "timezone", "enabled", "paused_reason", "repeat",
		"payload", "misfire", "overlap", "window", "on_interrupt", "next_run_at", "last_run_at", "last_status",
		"last_error", "failure_streak", "created_at", "finished_at", "state"} {
		if _, ok := list[0][k]; !ok {
			t.Errorf("key %q missing from %v", k, list[0])
		}
	}
}
