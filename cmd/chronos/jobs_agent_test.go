package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/provider"
)

// proccli runs the binary as its own process with env added and returns its
// output and pid; it fails t unless the exit status is want.
func proccli(t *testing.T, bin string, env []string, want int, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	if code != want {
		t.Fatalf("%s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out)
	}
	return string(out), cmd.Process.Pid
}

// runOutput returns the output file's content of the run jobs run printed.
func runOutput(t *testing.T, printed string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^output: (.+)$`).FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("no output path in %q", printed)
	}
	b, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJobsThroughTheServingAgent: with `chronos agent serve` running, jobs
// add, run, pause, resume and rm go through its local API: the run is the
// agent's child and has the agent's environment, not the command's; with
// --here the run is the command's own child.
func TestJobsThroughTheServingAgent(t *testing.T) {
	t.Parallel()
	bin := buildChronos(t)
	home := filepath.Join(t.TempDir(), "home")
	env := []string{envAgentConfig + "=", "CHRONOS_UI_LISTEN=127.0.0.1:0"}
	agent := startProc(t, bin, append(env, "AGENT_ONLY_SECRET=agent-s3cret"), nil,
		"agent", "serve", "--home", home, "--listen", "127.0.0.1:0")
	poll(t, 20*time.Second, "the agent's local API recorded in serving.json", func() bool {
		rec, ok, _ := provider.ReadServing(home)
		return ok && rec.UI != ""
	})
	agentPID := agent.cmd.Process.Pid

	out, _ := proccli(t, bin, env, 0, "jobs", "add", "--home", home, "--id", "who", "--schedule", "@daily", "--",
		`echo "secret=${AGENT_ONLY_SECRET:-none}"; echo "ppid=$PPID"`)
	if !strings.Contains(out, "added job who") || !strings.Contains(out, fmt.Sprintf("done by the agent serving home %s (pid %d", home, agentPID)) {
		t.Fatalf("jobs add:\n%s", out)
	}

	out, _ = proccli(t, bin, env, 0, "jobs", "run", "--home", home, "who")
	got := runOutput(t, out)
	if !strings.Contains(got, "secret=agent-s3cret\n") || !strings.Contains(got, fmt.Sprintf("ppid=%d\n", agentPID)) {
		t.Fatalf("run through the agent (pid %d) printed %q", agentPID, got)
	}

	out, cliPID := proccli(t, bin, env, 0, "jobs", "run", "--here", "--home", home, "who")
	got = runOutput(t, out)
	if !strings.Contains(got, "secret=none\n") || !strings.Contains(got, fmt.Sprintf("ppid=%d\n", cliPID)) {
		t.Fatalf("run --here (cli pid %d) printed %q", cliPID, got)
	}

	out, _ = proccli(t, bin, env, 0, "jobs", "pause", "--home", home, "--reason", "quiet week", "who")
	if j := storedJob(t, home, "who"); !strings.Contains(out, "done by the agent") || j.Enabled || j.PausedReason != "quiet week" {
		t.Fatalf("pause: %+v\n%s", j, out)
	}
	proccli(t, bin, env, 0, "jobs", "resume", "--home", home, "who")
	if j := storedJob(t, home, "who"); !j.Enabled {
		t.Fatalf("resume: %+v", j)
	}
	out, _ = proccli(t, bin, env, 2, "jobs", "pause", "--home", home, "nobody")
	if !strings.Contains(out, "not found") {
		t.Fatalf("pause of an unknown job through the agent:\n%s", out)
	}
	proccli(t, bin, env, 0, "jobs", "rm", "--home", home, "who")
	if _, err := os.Stat(filepath.Join(home, "jobs.json")); err != nil {
		t.Fatal(err)
	}
	out, _ = proccli(t, bin, env, 0, "jobs", "list", "--home", home)
	if strings.Contains(out, "who") {
		t.Fatalf("removed job still listed:\n%s", out)
	}
}
