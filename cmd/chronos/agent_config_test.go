package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/sidecar"
)

// runFrom runs the built binary with args in the working directory dir, with
// an environment that holds no CHRONOS_ variable but env and a HOME of its
// own, and returns its stdout, stderr and exit error.
func runFrom(t *testing.T, bin, dir string, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHRONOS_") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "HOME="+t.TempDir()), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// TestAgentStatusFindsTheHomeNextToItsConfig is the relative-path rule as a
// user meets it: `chronos agent status --config /abs/agent.yaml` run from
// another directory reads the home agent.yaml names relative to itself, and
// creates nothing in the working directory. The job is added as the README
// does, from the config's directory with a relative --home before the agent
// ever ran: the home is still recognised as the config's, so the job takes
// the config's zone.
func TestAgentStatusFindsTheHomeNextToItsConfig(t *testing.T) {
	t.Parallel()
	bin := buildChronos(t)
	conf := filepath.Join(t.TempDir(), "etc")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(conf, "agent.yaml")
	writeFile(t, cfgPath, "home: agent-home\ntimezone: Europe/Paris\n")
	home := filepath.Join(conf, "agent-home")
	if _, errOut, err := runFrom(t, bin, conf, []string{envAgentConfig + "=" + cfgPath}, "jobs", "add", "--home", "agent-home", "--id", "nightly", "--schedule", "0 3 * * *", "--", "true"); err != nil {
		t.Fatalf("jobs add: %v: %s", err, errOut)
	}
	out, errOut, err := runFrom(t, bin, conf, nil, "jobs", "show", "--home", home, "nightly", "--json")
	var j agent.JobView
	if err != nil || json.Unmarshal([]byte(out), &j) != nil || j.Timezone != "Europe/Paris" {
		t.Fatalf("jobs show: %v %q %s: zone %q, want the config's Europe/Paris", err, out, errOut, j.Timezone)
	}

	elsewhere := t.TempDir()
	out, errOut, err = runFrom(t, bin, elsewhere, nil, "agent", "status", "--config", cfgPath, "--json")
	if err != nil {
		t.Fatalf("agent status: %v: %s", err, errOut)
	}
	var st sidecar.Report
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if st.Home != home {
		t.Errorf("home %q, want %q (next to the config file)", st.Home, home)
	}
	if !slices.ContainsFunc(st.Desired, func(a provider.Arm) bool { return a.JobID == "nightly" }) {
		t.Errorf("the job in the config's home is not seen: desired %+v", st.Desired)
	}
	entries, err := os.ReadDir(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("agent status created %q in the working directory", entries[0].Name())
	}
}
