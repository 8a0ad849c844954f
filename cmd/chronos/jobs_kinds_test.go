package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
)

func TestJobsFanoutAndRunGraph(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	items := filepath.Join(dir, "targets.txt")
	if err := os.WriteFile(items, []byte("a.example\nbad.example\nc.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, "jobs", "add", "--home", home, "--id", "scan", "--schedule", "@yearly", "--kind", "fanout",
		"--inputs-from", "file://"+items, "--concurrency", "2", "--partial-tolerance", "0.5", "--item-var", "T",
		"--reducer", "echo reduced", "--reducer-run-on", "any_success", "--", `echo "scan $T"; [ "$T" != bad.example ]`)
	if !strings.Contains(out, "added job scan") {
		t.Fatalf("add:\n%s", out)
	}
	if out := mustCLI(t, "jobs", "show", "--home", home, "scan"); !strings.Contains(out, "fanout") || !strings.Contains(out, "concurrency 2, item in $T") {
		t.Fatalf("show:\n%s", out)
	}
	if code, _, errOut := cli(t, "jobs", "run", "--home", home, "scan"); code != 0 {
		t.Fatalf("run: exit %d %s", code, errOut)
	}
	var runs []ledger.Run
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 5 || runs[0].Role != ledger.RoleParent || runs[0].State != ledger.StatePartial {
		t.Fatalf("runs: %+v", runs)
	}
	parent := runs[0].RunID
	tree := mustCLI(t, "runs", "list", "--home", home, "--tree")
	if lines := strings.Split(strings.TrimSpace(tree), "\n"); len(lines) != 5 || !strings.HasPrefix(lines[0], parent) ||
		!strings.Contains(lines[2], `item="bad.example"`) || !strings.Contains(lines[2], "failed") || !strings.Contains(lines[4], "└─ "+parent+".reduce") {
		t.Fatalf("tree:\n%s", tree)
	}
	show := mustCLI(t, "runs", "show", "--home", home, parent)
	for _, want := range []string{"state:    partial", "children: 1 failed, 2 succeeded", `item="c.example"`, "reducer"} {
		if !strings.Contains(show, want) {
			t.Fatalf("show lacks %q:\n%s", want, show)
		}
	}
	var g struct {
		Run      ledger.Run   `json:"run"`
		Children []ledger.Run `json:"children"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "show", "--home", home, "--json", parent)), &g); err != nil {
		t.Fatal(err)
	}
	if g.Run.RunID != parent || len(g.Children) != 4 || g.Children[1].Item != "bad.example" || g.Children[1].ParentRunID != parent {
		t.Fatalf("show --json: %+v", g)
	}
	for _, args := range [][]string{{"runs", "show", "nope"}, {"runs", "cancel", parent}} {
		if code, _, _ := cli(t, append(args, "--home", home)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestJobsAddKindsRefused(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--inputs-from", "file:///x"}, "--inputs-from needs --kind fanout"},
		{[]string{"--kind", "workflow", "--inputs-from", "file:///x"}, "needs --kind fanout"},
		{[]string{"--kind", "fanout", "--inputs-from", "sql://main?SELECT 1"}, `sql database "main" is not registered`},
		{[]string{"--kind", "fanout", "--inputs-from", "http://10.0.0.1/items"}, "not a public address"},
		{[]string{"--kind", "workflow", "--depends-on", "a", "--window", "daily"}, "window must be a positive duration"},
		{[]string{"--kind", "plain", "--depends-on", "a"}, "needs --kind workflow"},
	}
	for _, c := range cases {
		args := append([]string{"jobs", "add", "--home", home, "--schedule", "@yearly"}, c.args...)
		code, _, errOut := cli(t, append(args, "--", "true")...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want 2 with %q", c.args, code, errOut, c.want)
		}
	}
	if out := mustCLI(t, "jobs", "list", "--home", home, "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("refused adds stored jobs: %s", out)
	}
}

func TestJobsAddWorkflowFromFlagsAndFile(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "dep", "--schedule", "@yearly", "--", "true")
	mustCLI(t, "jobs", "add", "--home", home, "--id", "digest", "--schedule", "@yearly", "--kind", "workflow",
		"--depends-on", "dep", "--window", "24h", "--on-missing", "skip", "--on-dep-fail", "fail", "--", "echo digest")
	if code, _, _ := cli(t, "jobs", "run", "--home", home, "digest"); code == 0 {
		t.Fatal("a workflow whose dependency never ran succeeded")
	}
	var runs []ledger.Run
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--job", "digest", "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].State != ledger.StateSkipped || !strings.Contains(runs[0].Reason, "dep missing") {
		t.Fatalf("runs: %+v", runs)
	}
	spec := filepath.Join(dir, "job.yaml")
	body := fmt.Sprintf("id: from-file\nschedule: '@yearly'\nkind: fanout\ninputs_from: file://%s\nconcurrency: 3\ncommand: [echo, hi]\nretry: {max_attempts: 2}\nreducer: {command: 'true', run_on: always}\n", spec)
	if err := os.WriteFile(spec, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "jobs", "add", "--home", home, "--file", spec)
	if out := mustCLI(t, "jobs", "show", "--home", home, "from-file"); !strings.Contains(out, "concurrency 3") || !strings.Contains(out, "attempts 2 each") || !strings.Contains(out, "true (run on always)") {
		t.Fatalf("show:\n%s", out)
	}
	if code, _, errOut := cli(t, "jobs", "add", "--home", home, "--file", spec, "--schedule", "@daily"); code != 2 || !strings.Contains(errOut, "--file takes the whole job") {
		t.Fatalf("--file with flags: exit %d %s", code, errOut)
	}
	if err := os.WriteFile(spec, []byte("id: x\nschedule: '@yearly'\ncommand: true\nconcurency: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cli(t, "jobs", "add", "--home", home, "--file", spec); code != 2 || !strings.Contains(errOut, "concurency") {
		t.Fatalf("unknown key: exit %d %s", code, errOut)
	}
}

// TestRunsCancelStopsAFanout: runs cancel, from another command, stops a
// fanout that jobs run is running: its children are cancelled.
func TestRunsCancelStopsAFanout(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	items := filepath.Join(dir, "items")
	if err := os.WriteFile(items, []byte("1\n2\n3\n4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "jobs", "add", "--home", home, "--id", "slow", "--schedule", "@yearly", "--kind", "fanout",
		"--inputs-from", "file://"+items, "--concurrency", "2", "--", "sleep 30")
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := cli(t, "jobs", "run", "--home", home, "slow")
		done <- result{code, out, errOut}
	}()
	var parent string
	deadline := time.Now().Add(20 * time.Second)
	for parent == "" {
		var runs []ledger.Run
		_ = json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--json")), &runs)
		running := 0
		for _, r := range runs {
			if r.Role == ledger.RoleChild && r.State == ledger.StateRunning {
				running++
			}
		}
		if running == 2 {
			parent = runs[0].RunID
		} else if time.Now().After(deadline) {
			t.Fatal("the fanout's children did not start")
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var req map[string]string
	if out := mustCLI(t, "runs", "cancel", "--home", home, "--json", parent); json.Unmarshal([]byte(out), &req) != nil ||
		req["run_id"] != parent || req["cancel"] != "requested" {
		t.Fatalf("cancel: %s", out)
	}
	select {
	case r := <-done:
		if r.code == 0 || !strings.Contains(r.out+r.err, "cancelled") {
			t.Fatalf("jobs run: exit %d\n%s%s", r.code, r.out, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("jobs run did not end after the cancel")
	}
	var g struct {
		Children []ledger.Run `json:"children"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "show", "--home", home, "--json", parent)), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Children) != 2 || g.Children[0].State != ledger.StateCancelled || g.Children[1].State != ledger.StateCancelled {
		t.Fatalf("children %+v", g.Children)
	}
}
