package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
)

// TestJobsFlex: jobs add --flex and jobs edit --flex set a job's flexible
// window, kept in jobs.json as "flex" and shown by jobs show; --flex 0
// removes it; a bad window is a usage error (exit 2) that changes nothing.
func TestJobsFlex(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	jobsFile := filepath.Join(home, "jobs.json")
	show := func(id string) agent.JobView {
		t.Helper()
		var v agent.JobView
		if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, id, "--json")), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	out := mustCLI(t, "jobs", "add", "--home", home, "--id", "f", "--schedule", "every 1h", "--flex", "10m", "--", "true")
	if !strings.Contains(out, "added job f") || !strings.Contains(out, "flex: 10m0s") {
		t.Fatalf("add output:\n%s", out)
	}
	mustCLI(t, "jobs", "add", "--home", home, "--id", "plain", "--schedule", "every 1h", "--", "true")
	if v := show("f"); v.Flex.Std() != 10*time.Minute {
		t.Fatalf("show --json flex %s", v.Flex.Std())
	}
	if out := mustCLI(t, "jobs", "show", "--home", home, "f"); !strings.Contains(out, "flex:") || !strings.Contains(out, "up to 10m0s after it") {
		t.Fatalf("show:\n%s", out)
	}
	if out := mustCLI(t, "jobs", "show", "--home", home, "plain"); strings.Contains(out, "flex") {
		t.Fatalf("show of a job without a window:\n%s", out)
	}
	raw, err := os.ReadFile(jobsFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(raw), `"flex":`) != 1 || !strings.Contains(string(raw), `"flex":"10m0s"`) {
		t.Fatalf("jobs.json:\n%s", raw)
	}

	out = mustCLI(t, "jobs", "edit", "--home", home, "f", "--flex", "1m30s")
	if !strings.Contains(out, "edited job f") || !strings.Contains(out, "flex: 1m30s") {
		t.Fatalf("edit output:\n%s", out)
	}
	if v := show("f"); v.Flex.Std() != 90*time.Second || v.Schedule != "every 1h" {
		t.Fatalf("after edit: flex %s, schedule %q", v.Flex.Std(), v.Schedule)
	}

	saved, err := os.ReadFile(jobsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--id", "n", "--schedule", "every 1h", "--flex", "-1s", "--", "true"}, "--flex -1s must not be negative"},
		{[]string{"add", "--id", "d", "--schedule", "in 3d", "--flex", "25h", "--", "true"}, "longer than the most of 24h0m0s"},
		{[]string{"add", "--id", "s", "--schedule", "every 1h", "--flex", "1500ms", "--", "true"}, "whole seconds"},
		{[]string{"add", "--id", "w", "--schedule", "every 1h", "--flex", "soon", "--", "true"}, `invalid argument "soon" for "--flex"`},
		{[]string{"add", "--id", "p", "--schedule", "every 10m", "--flex", "10m", "--", "true"}, "shorter than the schedule's period"},
		{[]string{"edit", "f", "--flex", "-5m"}, "must not be negative"},
		{[]string{"edit", "f", "--flex", "24h1s"}, "longer than the most"},
		{[]string{"edit", "f", "--flex", "2h"}, "shorter than the schedule's period"},
		{[]string{"edit", "f", "--flex", "later"}, `invalid argument "later" for "--flex"`},
	} {
		code, _, errOut := cli(t, append([]string{"jobs", tc.args[0], "--home", home}, tc.args[1:]...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("jobs %v: exit %d, stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if now, _ := os.ReadFile(jobsFile); !bytes.Equal(saved, now) {
		t.Fatalf("bad windows changed jobs.json:\n%s\n---\n%s", saved, now)
	}

	mustCLI(t, "jobs", "edit", "--home", home, "f", "--flex", "0")
	if v := show("f"); v.Flex != 0 {
		t.Fatalf("--flex 0 left %s", v.Flex.Std())
	}
	if raw, _ := os.ReadFile(jobsFile); strings.Contains(string(raw), `"flex"`) {
		t.Fatalf("jobs.json keeps a removed window:\n%s", raw)
	}
}

// TestJobsAddFileFlex: a job file's flex key is the window.
func TestJobsAddFileFlex(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte("id: ff\nschedule: every 2h\nflex: 15m\ncommand: 'true'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "jobs", "add", "--home", home, "--file", file)
	var v agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, "ff", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Flex.Std() != 15*time.Minute {
		t.Fatalf("flex %s", v.Flex.Std())
	}
}
