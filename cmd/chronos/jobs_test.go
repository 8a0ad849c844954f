package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/provider"
)

// cli runs the binary in-process and returns exit code, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, args...)
	if code != 0 {
		t.Fatalf("chronos %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func TestJobsLifecycle(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	out := mustCLI(t, "jobs", "add", "--home", home, "--id", "greet", "--name", "Greeter",
		"--schedule", "every 1h", "--window", "daily", "--", `echo "hello from $CHRONOS_JOB_ID"`)
	if !strings.Contains(out, "added job greet") || !strings.Contains(out, "interval every 1h") {
		t.Fatalf("add output:\n%s", out)
	}
	if fires := strings.Count(out, "\n  20"); fires != 3 {
		t.Fatalf("add printed %d next fires, want 3:\n%s", fires, out)
	}

	var list []agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "list", "--home", home, "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "greet" || list[0].State != "scheduled" || list[0].Payload.Shell == nil {
		t.Fatalf("list: %+v", list)
	}
	if out := mustCLI(t, "jobs", "list", "--home", home); !strings.Contains(out, "greet") || !strings.Contains(out, "Greeter") {
		t.Fatalf("list table:\n%s", out)
	}
	if out := mustCLI(t, "jobs", "show", "--home", home, "greet"); !strings.Contains(out, "window daily") {
		t.Fatalf("show:\n%s", out)
	}

	// A manual run goes through the claim and the ledger and waits.
	out = mustCLI(t, "jobs", "run", "--home", home, "greet")
	if !strings.Contains(out, "succeeded") {
		t.Fatalf("run:\n%s", out)
	}
	logs, _ := filepath.Glob(filepath.Join(home, "output", "greet", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("output files %v", logs)
	}
	if b, _ := os.ReadFile(logs[0]); string(b) != "hello from greet\n" {
		t.Fatalf("output %q", b)
	}
	// The daily window blocks a second run unless forced.
	code, out, _ := cli(t, "jobs", "run", "--home", home, "greet")
	if code != 1 || !strings.Contains(out, "skipped") || !strings.Contains(out, "window daily") {
		t.Fatalf("second run: exit %d\n%s", code, out)
	}
	out = mustCLI(t, "jobs", "run", "--home", home, "greet", "--force")
	if !strings.Contains(out, "succeeded") {
		t.Fatalf("forced run:\n%s", out)
	}

	var runs []struct {
		RunID, JobID, State, Trigger string
		Forced                       bool
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--job", "greet", "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs[0].State != "succeeded" || runs[1].State != "skipped" || !runs[2].Forced || runs[2].Trigger != "manual" {
		t.Fatalf("runs: %+v", runs)
	}
	if out := mustCLI(t, "runs", "list", "--home", home, "--limit", "1"); strings.Count(out, "\n") != 2 {
		t.Fatalf("--limit 1:\n%s", out)
	}
	if out := mustCLI(t, "runs", "list", "--home", home, "--since", "2999-01-01", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("--since in the future: %s", out)
	}

	mustCLI(t, "jobs", "pause", "--home", home, "greet", "--reason", "maintenance")
	var j agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, "greet", "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.State != "paused" || j.PausedReason != "maintenance" || j.NextRunAt != nil {
		t.Fatalf("paused job: %+v", j)
	}
	if out := mustCLI(t, "jobs", "resume", "--home", home, "greet"); !strings.Contains(out, "next fire 20") {
		t.Fatalf("resume: %s", out)
	}
	mustCLI(t, "jobs", "rm", "--home", home, "greet")
	if out := mustCLI(t, "jobs", "list", "--home", home, "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("after rm: %s", out)
	}
}

func TestJobsAddHTTP(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "hook", "--schedule", "*/5 * * * *", "--tz", "Europe/Paris",
		"--http-url", "https://example.org/hook", "--http-method", "POST", "--http-header", "X-Token: abc",
		"--http-body", "{}", "--http-accept", "200,204", "--overlap", "queue_one", "--misfire", "skip", "--timeout", "30s")
	var j agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, "hook", "--json")), &j); err != nil {
		t.Fatal(err)
	}
	h := j.Payload.HTTP
	if h == nil || h.Method != "POST" || h.Headers["X-Token"] != "abc" || len(h.Accept) != 2 || j.Timezone != "Europe/Paris" ||
		j.Overlap != "queue_one" || j.Misfire != "skip" || j.Timeout.Std().String() != "30s" || j.Kind != "cron" {
		t.Fatalf("job %+v payload %+v", j, h)
	}
}

// TestJobsBadInput: every bad invocation exits 2 with one line on stderr and
// leaves jobs.json byte for byte as it was.
func TestJobsBadInput(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "keep", "--schedule", "@hourly", "--", "true")
	before, err := os.ReadFile(filepath.Join(home, "jobs.json"))
	if err != nil {
		t.Fatal(err)
	}
	add := func(extra ...string) []string {
		return append([]string{"jobs", "add", "--home", home}, extra...)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown job show", []string{"jobs", "show", "--home", home, "nope"}, "not found"},
		{"unknown job pause", []string{"jobs", "pause", "--home", home, "nope"}, "not found"},
		{"unknown job resume", []string{"jobs", "resume", "--home", home, "nope"}, "not found"},
		{"unknown job rm", []string{"jobs", "rm", "--home", home, "nope"}, "not found"},
		{"unknown job run", []string{"jobs", "run", "--home", home, "nope"}, "no job"},
		{"invalid schedule", add("--schedule", "whenever", "--", "true"), "schedule"},
		{"never fires", add("--schedule", "0 0 30 2 *", "--", "true"), "never"},
		{"missing schedule", add("--", "true"), "--schedule is required"},
		{"command and url", add("--schedule", "@daily", "--http-url", "https://example.org", "--", "true"), "not both"},
		{"no payload", add("--schedule", "@daily"), "give a command"},
		{"http flags without url", add("--schedule", "@daily", "--http-method", "POST", "--", "true"), "need --http-url"},
		{"bad url", add("--schedule", "@daily", "--http-url", "ftp://x"), "http"},
		{"bad header", add("--schedule", "@daily", "--http-url", "https://x.org", "--http-header", "nocolon"), "Name: value"},
		{"bad misfire", add("--schedule", "@daily", "--misfire", "often", "--", "true"), "misfire"},
		{"bad overlap", add("--schedule", "@daily", "--overlap", "stack", "--", "true"), "overlap"},
		{"bad window", add("--schedule", "@daily", "--window", "yearly", "--", "true"), "window"},
		{"bad on-interrupt", add("--schedule", "@daily", "--on-interrupt", "ignore", "--", "true"), "on-interrupt"},
		{"bad zone", add("--schedule", "@daily", "--tz", "Nowhere/City", "--", "true"), "zone"},
		{"zone conflicts with CRON_TZ", add("--schedule", "CRON_TZ=Asia/Tokyo 0 9 * * *", "--tz", "Europe/Paris", "--", "true"), "conflicts"},
		{"bad timeout", add("--schedule", "@daily", "--timeout", "soon", "--", "true"), "timeout"},
		{"negative repeat", add("--schedule", "@daily", "--repeat", "-2", "--", "true"), "repeat"},
		{"taken id", add("--id", "keep", "--schedule", "@daily", "--", "true"), "exists"},
		{"bad id", add("--id", "a/b", "--schedule", "@daily", "--", "true"), "job id"},
		{"retry flags without retry", add("--schedule", "@daily", "--retry-attempts", "5", "--", "true"), "--on-interrupt retry"},
		{"bad env", add("--schedule", "@daily", "--env", "NOEQUALS", "--", "true"), "KEY=VALUE"},
		{"command before dash", add("--schedule", "@daily", "true"), "after \"--\""},
		{"unknown flag", add("--schedule", "@daily", "--colour", "--", "true"), "unknown flag"},
		{"runs bad since", []string{"runs", "list", "--home", home, "--since", "yesterday-ish"}, "--since"},
		{"runs bad limit", []string{"runs", "list", "--home", home, "--limit", "-1"}, "--limit"},
		{"show needs an id", []string{"jobs", "show", "--home", home}, "arg"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want 2\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("stderr %q: want one line mentioning %q", errOut, tc.want)
			}
			after, err := os.ReadFile(filepath.Join(home, "jobs.json"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatalf("jobs.json changed:\n%s\n---\n%s", before, after)
			}
		})
	}
}

// jobsWith runs the jobs command tree with arm as its arming dependency.
func jobsWith(t *testing.T, arm armFunc, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	c := newJobsCmdWith(arm)
	c.SetArgs(args)
	c.SetOut(&out)
	c.SetErr(&errb)
	if err := c.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("jobs %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// TestJobsChangeHook: add, edit, pause, resume and rm arm the change through
// the target home, and list does not.
func TestJobsChangeHook(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	var calls []string
	arm := func(_ context.Context, tg provider.Target, _ *agent.Runtime) (provider.ArmReport, error) {
		calls = append(calls, tg.Home)
		return provider.ArmReport{}, nil
	}
	out := jobsWith(t, arm, "add", "--home", home, "--id", "h", "--schedule", "@daily", "--", "true")
	if !strings.Contains(out, "nothing will arm this change until the agent next starts") {
		t.Fatalf("add without a known agent does not say it is not armed:\n%s", out)
	}
	jobsWith(t, arm, "edit", "--home", home, "h", "--schedule", "@hourly")
	jobsWith(t, arm, "pause", "--home", home, "h")
	jobsWith(t, arm, "resume", "--home", home, "h")
	jobsWith(t, arm, "list", "--home", home)
	jobsWith(t, arm, "rm", "--home", home, "h")
	if len(calls) != 5 {
		t.Fatalf("arm called %d times (%v), want 5", len(calls), calls)
	}
	for _, c := range calls {
		if c != home {
			t.Fatalf("arm got home %q, want %q", c, home)
		}
	}
}

func TestJobsHomeFromEnvironment(t *testing.T) {
	home := t.TempDir()
	t.Setenv(envHome, home)
	mustCLI(t, "jobs", "add", "--id", "env", "--schedule", "@daily", "--", "true")
	if _, err := os.Stat(filepath.Join(home, "jobs.json")); err != nil {
		t.Fatalf("CHRONOS_HOME not used: %v", err)
	}
}

func TestJobsRunFailureAndPausedAdd(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "bad", "--schedule", "@daily", "--", "sh", "-c", "echo nope; exit 7")
	code, out, errOut := cli(t, "jobs", "run", "--home", home, "bad")
	if code != exitFailure || !strings.Contains(out, "failed") || !strings.Contains(out, "exit status 7") || !strings.Contains(errOut, "failed") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var j agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, "bad", "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Payload.Shell.Argv) != 3 || j.LastStatus != "failed" || j.FailureStreak != 1 {
		t.Fatalf("job %+v", j)
	}
	out = mustCLI(t, "jobs", "add", "--home", home, "--id", "later", "--schedule", "@daily", "--paused", "--", "true")
	if !strings.Contains(out, "paused") {
		t.Fatalf("paused add: %s", out)
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, "later", "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.State != "paused" || j.NextRunAt != nil {
		t.Fatalf("paused job %+v", j)
	}
}
