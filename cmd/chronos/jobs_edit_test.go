package main

import (
	"bytes"
	"encoding/json"
	"github.com/chronoscron/chronos/agent"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJobsEdit: jobs edit changes what it is given and keeps the id, the
// ledger history and the idempotency window; bad input changes nothing.
func TestJobsEdit(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "e", "--schedule", "every 1h", "--window", "daily", "--", "echo before")
	if out := mustCLI(t, "jobs", "run", "--home", home, "e"); !strings.Contains(out, "succeeded") {
		t.Fatalf("run: %s", out)
	}
	var before agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, "e", "--json")), &before); err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, "jobs", "edit", "--home", home, "e", "--name", "Edited", "--schedule", "every 2h", "--", "echo after")
	if !strings.Contains(out, "edited job e") || !strings.Contains(out, "interval every 2h") || strings.Count(out, "\n  20") != 3 {
		t.Fatalf("edit output:\n%s", out)
	}
	var after agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, "e", "--json")), &after); err != nil {
		t.Fatal(err)
	}
	if after.ID != "e" || after.Name != "Edited" || after.Schedule != "every 2h" || after.Payload.Shell.Command != "echo after" ||
		after.Window != "daily" || after.LastSuccessRun != before.LastSuccessRun || after.LastSuccessRun == "" {
		t.Fatalf("edited job %+v", after)
	}
	// The daily window still holds the run made before the edit.
	code, out, _ := cli(t, "jobs", "run", "--home", home, "e")
	if code != exitFailure || !strings.Contains(out, "window daily") {
		t.Fatalf("run after edit: exit %d\n%s", code, out)
	}
	var runs []struct{ JobID, State string }
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--job", "e", "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].State != "succeeded" || runs[1].State != "skipped" {
		t.Fatalf("history %+v", runs)
	}

	saved, err := os.ReadFile(filepath.Join(home, "jobs.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"e", "--schedule", "whenever"}, "schedule"},
		{[]string{"e", "--misfire", "often"}, "misfire"},
		{[]string{"e", "--tz", "Nowhere/City"}, "zone"},
		{[]string{"e"}, "nothing to change"},
		{[]string{"e", "--http-method", "POST"}, "need --http-url"},
		{[]string{"e", "stray"}, "after \"--\""},
		{[]string{"nope", "--name", "x"}, "not found"},
	} {
		code, _, errOut := cli(t, append([]string{"jobs", "edit", "--home", home}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("edit %v: exit %d, stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if now, _ := os.ReadFile(filepath.Join(home, "jobs.json")); !bytes.Equal(saved, now) {
		t.Fatalf("bad edits changed jobs.json:\n%s\n---\n%s", saved, now)
	}
}

// TestJobsPausedSlotsInRunsList: the slots that pass while a job is paused
// show in runs list as skipped with reason paused, one line each.
func TestJobsPausedSlotsInRunsList(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "tick", "--schedule", "every 1s", "--", "true")
	mustCLI(t, "jobs", "pause", "--home", home, "tick")
	type run struct {
		RunID         string `json:"run_id"`
		State, Reason string
	}
	var runs []run
	deadline := time.Now().Add(10 * time.Second)
	for len(runs) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no paused slots recorded: %+v", runs)
		}
		time.Sleep(200 * time.Millisecond) // slots pass with the wall clock
		if err := json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--job", "tick", "--json")), &runs); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if r.State != "skipped" || r.Reason != "paused" || seen[r.RunID] {
			t.Fatalf("runs %+v: want one skipped line per slot, reason paused", runs)
		}
		seen[r.RunID] = true
	}
	if out := mustCLI(t, "runs", "list", "--home", home, "--job", "tick"); !strings.Contains(out, "skipped") || !strings.Contains(out, "paused") {
		t.Fatalf("runs table:\n%s", out)
	}
}
