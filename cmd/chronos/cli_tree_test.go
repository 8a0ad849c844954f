package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// noDataLeaves are the runnable commands that print no data, and so take no
// --json. Every other runnable leaf must.
var noDataLeaves = map[string]string{
	"chronos nas":         "runs the service (--print-config prints YAML, the config file's own format)",
	"chronos relay":       "runs dispatchers",
	"chronos agent serve": "runs the agent; logs go to stderr",
	"chronos demo":        "a live log for a person to watch",
	"chronos man":         "writes man page files",
	"chronos healthcheck": "a probe: its exit code is the answer",
	// cobra's completion commands print shell scripts.
	"chronos completion bash":       "a shell script",
	"chronos completion zsh":        "a shell script",
	"chronos completion fish":       "a shell script",
	"chronos completion powershell": "a shell script",
	"chronos help":                  "help text",
}

// jsonElsewhere are the --json commands TestJSONCommandsPrintOneDocument
// does not run, and the tests that do: the operator commands need a NAS
// (TestDLQCLI, TestNASUnarmedCLI, TestInstanceAndCancelAllCLI,
// TestAgentDisableEnableCLI, TestAgentRekeyCLI), bench relay
// a store (TestBenchRelaySmall), nas migrate a PostgreSQL (TestNASMigrateCLI), notify replay an outbox with rows
// (TestNotifyListReplaySecret), jobs run a run (TestJobsRunJSON), runs
// show and cancel a fanout's run (TestJobsFanoutAndRunGraph, TestRunsCancelStopsAFanout).
var jsonElsewhere = []string{
	"chronos dlq list", "chronos dlq replay", "chronos nas unarmed", "chronos instance stop", "chronos instance start",
	"chronos agent cancel-all", "chronos agent disable", "chronos agent enable", "chronos agent rekey", "chronos bench relay", "chronos nas migrate", "chronos notify replay", "chronos jobs run",
	"chronos runs show", "chronos runs cancel",
}

// walk calls f for c and every command under it, cobra's help and
// completion commands included.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

// fullTree is the command tree as the binary runs it: with cobra's help
// and completion commands.
func fullTree() *cobra.Command {
	root := newRootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

// jsonCommands lists the command paths that take --json.
func jsonCommands(t *testing.T) []string {
	t.Helper()
	var out []string
	walk(fullTree(), func(c *cobra.Command) {
		if f := c.Flags().Lookup("json"); f != nil {
			if f.Value.Type() != "bool" {
				t.Errorf("%s: --json is a %s flag, want bool", c.CommandPath(), f.Value.Type())
			}
			out = append(out, c.CommandPath())
		}
	})
	return out
}

// TestCommandTree: every command says what it does, every leaf has a
// longer text or an example, every leaf that prints data takes --json, and
// a bad flag is a usage error (exit 2) everywhere.
func TestCommandTree(t *testing.T) {
	t.Parallel()
	leaves := 0
	walk(fullTree(), func(c *cobra.Command) {
		path := c.CommandPath()
		if c.Short == "" {
			t.Errorf("%s: no Short", path)
		}
		if !c.Runnable() || c.HasSubCommands() {
			return // a group: it prints its help
		}
		leaves++
		if c.Long == "" && c.Example == "" && !strings.HasPrefix(path, "chronos completion") && path != "chronos help" {
			t.Errorf("%s: neither Long nor Example", path)
		}
		_, quiet := noDataLeaves[path]
		if hasJSON := c.Flags().Lookup("json") != nil; hasJSON == quiet {
			t.Errorf("%s: --json %v, but it is %sin the list of commands that print no data", path, hasJSON, map[bool]string{false: "not "}[quiet])
		}
		args := append(strings.Fields(path)[1:], "--no-such-flag")
		if code, _, errOut := nasRunCLI(t, args...); code != exitUsage || !strings.Contains(errOut, "no-such-flag") {
			t.Errorf("%s --no-such-flag: exit %d (%q), want %d", path, code, errOut, exitUsage)
		}
	})
	if leaves < 30 {
		t.Fatalf("walked %d leaves: the walk missed the tree", leaves)
	}
	for path := range noDataLeaves {
		found := false
		walk(fullTree(), func(c *cobra.Command) { found = found || c.CommandPath() == path })
		if !found {
			t.Errorf("%s is listed as printing no data but is no command", path)
		}
	}
}

// TestUsageErrorsExitTwo: wrong argument counts, unknown commands and
// missing required flags are usage errors with one line on stderr and
// nothing on stdout.
func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	for _, args := range [][]string{
		{"nope"}, {"jobs", "nope"}, {"version", "extra"}, {"instance", "stop"}, {"instance", "start", "a", "b"},
		{"agent", "cancel-all"}, {"man"}, {"man", "a", "b"}, {"keys", "list"}, {"keys", "list", "--json"},
		{"jobs", "show", "--home", home}, {"jobs", "rm", "--home", home, "nope", "--json"},
		{"jobs", "pause", "--home", home, "nope"}, {"schedule", "next", "whenever", "--json"},
		{"instance", "stop", "x", "--operator-token", "t"}, // no NAS URL
	} {
		code, out, errOut := nasRunCLI(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "chronos: ") {
			t.Errorf("chronos %s: exit %d, stdout %q, stderr %q; want exit 2, one line on stderr only", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// decodeOne decodes out as exactly one JSON document into v.
func decodeOne(out string, v any) error {
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if err := dec.Decode(new(any)); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON document")
	}
	return nil
}

// TestJSONCommandsPrintOneDocument runs every --json command that can run
// offline and checks that stdout is one JSON document of the documented
// shape; with jsonElsewhere it covers every command that takes --json.
func TestJSONCommandsPrintOneDocument(t *testing.T) {
	t.Parallel()
	home, keys := t.TempDir(), filepath.Join(t.TempDir(), "keys")
	after := "2026-01-01T00:00:00Z"
	var kid string
	steps := []struct {
		path  string
		args  []string
		check func(v any) bool
	}{
		{"chronos version", []string{"version"}, hasKeys("version", "os", "arch", "go")},
		{"chronos schedule next", []string{"schedule", "next", "@daily", "--after", after, "-n", "2"}, func(v any) bool {
			return hasKeys("expr", "description", "fires")(v) && len(v.(map[string]any)["fires"].([]any)) == 2
		}},
		{"chronos schedule explain", []string{"schedule", "explain", "every 90s", "--after", after}, hasKeys("expr", "description", "fires")},
		{"chronos keys generate", []string{"keys", "generate", "--out", keys}, func(v any) bool {
			kid, _ = v.(map[string]any)["kid"].(string)
			return hasKeys("kid", "alg", "state")(v) && kid != ""
		}},
		{"chronos keys list", []string{"keys", "list", "--dir", keys}, func(v any) bool {
			l, ok := v.([]any)
			return ok && len(l) == 1 && hasKeys("kid", "alg", "state")(l[0]) && l[0].(map[string]any)["state"] == "signing" // the only ES256 key
		}},
		{"chronos keys activate", nil, hasKeys("kid", "signing")}, // args once kid is known
		{"chronos jobs list", []string{"jobs", "list", "--home", home}, isEmptyList},
		{"chronos jobs add", []string{"jobs", "add", "--home", home, "--id", "tick", "--schedule", "every 1h", "--", "true"}, hasKeys("id", "state", "next_run_at")},
		{"chronos jobs edit", []string{"jobs", "edit", "tick", "--home", home, "--name", "Tick"}, hasKeys("id", "name")},
		{"chronos jobs show", []string{"jobs", "show", "tick", "--home", home}, hasKeys("id", "state")},
		{"chronos jobs pause", []string{"jobs", "pause", "tick", "--home", home}, func(v any) bool { return v.(map[string]any)["state"] == "paused" }},
		{"chronos jobs resume", []string{"jobs", "resume", "tick", "--home", home}, func(v any) bool { return v.(map[string]any)["state"] == "scheduled" }},
		{"chronos jobs rm", []string{"jobs", "rm", "tick", "--home", home}, func(v any) bool {
			m := v.(map[string]any)
			return m["id"] == "tick" && m["removed"] == true
		}},
		{"chronos runs list", []string{"runs", "list", "--home", home}, isEmptyList},
		{"chronos chain start", []string{"chain", "start", "--home", home, "--class", "disk", "--id", "disk-1", "--stage", "action", "--in", "1h", "--", "true"}, hasKeys("chain", "job")},
		{"chronos chain spawn", []string{"chain", "spawn", "--home", home, "--chain", "disk-1", "--stage", "verify", "--in", "2h", "--", "true"}, hasKeys("chain", "job")},
		{"chronos chains list", []string{"chains", "list", "--home", home}, func(v any) bool { l, ok := v.([]any); return ok && len(l) == 1 }},
		{"chronos chains show", []string{"chains", "show", "disk-1", "--home", home}, hasKeys("id", "class", "state", "steps")},
		{"chronos chain close", []string{"chain", "close", "--home", home, "--chain", "disk-1", "--failed", "--reason", "test"}, func(v any) bool {
			return v.(map[string]any)["state"] == "closed"
		}},
		{"chronos chain breaker list", []string{"chain", "breaker", "list", "--home", home}, func(v any) bool { l, ok := v.([]any); return ok && len(l) == 1 }},
		{"chronos chain breaker reset", []string{"chain", "breaker", "reset", "disk", "--home", home}, hasKeys("class", "state")},
		{"chronos notify list", []string{"notify", "list", "--home", home}, isEmptyList},
		{"chronos notify secret", []string{"notify", "secret", "--home", home}, func(v any) bool {
			s, _ := v.(map[string]any)["secret"].(string)
			return strings.HasPrefix(s, "whsec_")
		}},
		{"chronos agent status", []string{"agent", "status", "--home", home}, hasKeys("provider")},
	}
	var ran []string
	for _, s := range steps {
		if s.path == "chronos keys activate" {
			s.args = []string{"keys", "activate", "--dir", keys, kid}
		}
		args := append(slices.Clone(s.args), "--json")
		if i := slices.Index(s.args, "--"); i >= 0 { // --json goes before the command
			args = slices.Insert(slices.Clone(s.args), i, "--json")
		}
		code, out, errOut := nasRunCLI(t, args...)
		var v any
		if err := decodeOne(out, &v); code != exitOK || err != nil || !s.check(v) {
			t.Errorf("%s --json: exit %d, %v:\n%s\nstderr: %s", s.path, code, err, out, errOut)
		}
		ran = append(ran, s.path)
	}
	for _, path := range jsonCommands(t) {
		if !slices.Contains(ran, path) && !slices.Contains(jsonElsewhere, path) {
			t.Errorf("%s takes --json but no test runs it", path)
		}
	}
}

func hasKeys(keys ...string) func(any) bool {
	return func(v any) bool {
		m, ok := v.(map[string]any)
		for _, k := range keys {
			if _, has := m[k]; !has {
				return false
			}
		}
		return ok
	}
}

func isEmptyList(v any) bool {
	l, ok := v.([]any)
	return ok && len(l) == 0
}

// TestManWritesAPagePerCommand: chronos man DIR writes a page per command,
// named by its path, each with its own title and the command's text.
func TestManWritesAPagePerCommand(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "man1")
	if code, out, errOut := nasRunCLI(t, "man", dir); code != exitOK || out != "" {
		t.Fatalf("man: exit %d, %q %s", code, out, errOut)
	}
	walk(fullTree(), func(c *cobra.Command) {
		if c.Name() == "help" {
			return
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
		page, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", c.CommandPath(), err)
			return
		}
		title := "\n.TH \"" + strings.ToUpper(strings.ReplaceAll(c.CommandPath(), " ", "-")) + "\" \"1\""
		if !bytes.Contains(page, []byte(title)) || !bytes.Contains(page, []byte("\n"+strings.TrimSuffix(name, ".1")+" - ")) {
			t.Errorf("%s: no %s header:\n%.200s", name, title, page)
		}
	})
	page, _ := os.ReadFile(filepath.Join(dir, "chronos-instance-stop.1"))
	if !bytes.Contains(page, []byte(`\fB--operator-token\fP`)) || !bytes.Contains(page, []byte("chronos instance stop inst_42 --json")) {
		t.Errorf("chronos-instance-stop.1 lacks its flags or example:\n%s", page)
	}
	// Markdown must not read "[flags] (-- COMMAND ...)" or
	// "[@EVENT,...] (webhook:URL ...)" as links (rendered \[la]...\[ra]).
	page, _ = os.ReadFile(filepath.Join(dir, "chronos-jobs-add.1"))
	if bytes.Contains(page, []byte(`\[la]`)) || !bytes.Contains(page, []byte("KIND:DEST[@EVENT,...] (webhook:URL")) ||
		!bytes.Contains(page, []byte("[flags] (-- COMMAND")) {
		t.Errorf("chronos-jobs-add.1 garbles its synopsis or --notify:\n%s", page)
	}
	tree := fullTree()
	var before []string
	walk(tree, func(c *cobra.Command) { before = append(before, c.Use+c.Long) })
	escapeForMarkdown(tree)()
	i := 0
	walk(tree, func(c *cobra.Command) {
		if c.Use+c.Long != before[i] {
			t.Errorf("%s: its texts were not restored after the man pages", c.CommandPath())
		}
		i++
	})
	if code, _, errOut := nasRunCLI(t, "man", filepath.Join(dir, "chronos.1", "x")); code != exitFailure {
		t.Errorf("man into a file's path: exit %d (%s), want 1", code, errOut)
	}
}

// TestJobsRunJSON: jobs run --json prints the run, succeeded (exit 0) or
// failed (exit 1, with the reason on stderr).
func TestJobsRunJSON(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	for _, job := range []string{"ok", "bad"} {
		cmd := map[string]string{"ok": "true", "bad": "exit 3"}[job]
		if code, _, errOut := nasRunCLI(t, "jobs", "add", "--home", home, "--id", job, "--schedule", "every 1h", "--", cmd); code != exitOK {
			t.Fatalf("add %s: %s", job, errOut)
		}
	}
	for _, tc := range []struct {
		job, state string
		code       int
	}{{"ok", "succeeded", exitOK}, {"bad", "failed", exitFailure}} {
		code, out, errOut := nasRunCLI(t, "jobs", "run", "--home", home, tc.job, "--json")
		var run struct {
			JobID string `json:"job_id"`
			State string `json:"state"`
		}
		if err := decodeOne(out, &run); err != nil || code != tc.code || run.JobID != tc.job || run.State != tc.state {
			t.Errorf("jobs run %s --json: exit %d, %+v %v (stderr %q)", tc.job, code, run, err, errOut)
		}
		if tc.code == exitFailure && !strings.Contains(errOut, "failed") {
			t.Errorf("jobs run %s: stderr %q does not say it failed", tc.job, errOut)
		}
	}
}
