package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/internal/termtext"
)

func TestTermSafe(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want, lines string }{
		{"plain", "backup-db nightly", "backup-db nightly", ""},
		{"non-ascii stays", "café ✓ 日本 🙂 a\u00a0b", "café ✓ 日本 🙂 a\u00a0b", ""},
		{"backslash stays", `C:\temp\n`, `C:\temp\n`, ""},
		{"csi", "\x1b[2J\x1b[31mred", `\x1b[2J\x1b[31mred`, ""},
		{"osc title with bel", "\x1b]0;owned\x07x", `\x1b]0;owned\x07x`, ""},
		{"carriage return and backspace", "ok\rFAIL\b", `ok\rFAIL\x08`, ""},
		{"tab and newline", "a\tb\nc", `a\tb\nc`, "a\\tb\nc"},
		{"del", "a\x7fb", `a\x7fb`, ""},
		{"c1 csi", "a\u009b2Jb", `a\u009b2Jb`, ""},
		{"bidi override", "abc\u202edcb", `abc\u202edcb`, ""},
		{"zero width and line separator", "a\u200bb\u2028c", `a\u200bb\u2028c`, ""},
		{"invalid utf-8", "caf\xe9 \xff", `caf\xe9 \xff`, ""},
		{"private use beyond the bmp", "a\U000f0000", `a\U000f0000`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := termSafe(tc.in); got != tc.want {
				t.Fatalf("termSafe(%q) = %q, want %q", tc.in, got, tc.want)
			}
			wantLines := tc.lines
			if wantLines == "" {
				wantLines = tc.want
			}
			if got := termtext.Escape(tc.in, termtext.KeepNewlines); got != wantLines {
				t.Fatalf("termSafeLines(%q) = %q, want %q", tc.in, got, wantLines)
			}
		})
	}
}

func TestCutText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdefghijkl", 10, "abcdefg..."},
		{"ééééé", 8, "éé..."}, // never half a rune
	} {
		if got := termtext.Cut(tc.in, tc.n); got != tc.want || !utf8.ValidString(got) {
			t.Errorf("cutText(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// terminalSafe fails the test if out holds anything a terminal acts on:
// control bytes other than newline, DEL, C1 controls, bidi or zero-width
// format characters, or bytes that are not UTF-8.
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%s printed invalid UTF-8:\n%q", what, out)
	}
	for _, r := range out {
		if (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) || r == '\u202e' || r == '\u200b' {
			t.Fatalf("%s printed the control character %U raw:\n%q", what, r, out)
		}
	}
}

// TestCLIEscapesUserText writes hostile text (terminal escape sequences, a
// C1 CSI, a bidi override) into a job's name, paused reason and command, into
// a job id of a hand-edited jobs.json and into the ledger, and checks that
// the human output of jobs, runs and agent status shows it escaped, while
// JSON output keeps it exactly.
func TestCLIEscapesUserText(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	name := "\x1b]0;owned\x07Report\x1b[2J"
	reason := "\x1b[31mmaintenance\u202e"
	command := "printf '\x1b[5mblink\u009b0m'"
	out := mustCLI(t, "jobs", "add", "--home", home, "--id", "report", "--name", name,
		"--schedule", "every 1h", "--", command)
	terminalSafe(t, "jobs add", out)
	terminalSafe(t, "jobs pause", mustCLI(t, "jobs", "pause", "--home", home, "--reason", reason, "report"))

	for _, args := range [][]string{{"jobs", "list"}, {"jobs", "show", "report"}} {
		out := mustCLI(t, append(args, "--home", home)...)
		terminalSafe(t, strings.Join(args, " "), out)
		if !strings.Contains(out, `\x1b]0;owned\x07Report\x1b[2J`) || !strings.Contains(out, `\x1b[31mmaintenance\u202e`) {
			t.Fatalf("%s does not show the name and reason escaped:\n%s", strings.Join(args, " "), out)
		}
	}
	if out := mustCLI(t, "jobs", "show", "report", "--home", home); !strings.Contains(out, `\x1b[5mblink\u009b0m`) {
		t.Fatalf("jobs show does not show the command escaped:\n%s", out)
	}
	// JSON keeps the text exactly (its encoder escapes it).
	var jobs []agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "list", "--home", home, "--json")), &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Name != name || jobs[0].PausedReason != reason || jobs[0].Payload.Shell.Command != command {
		t.Fatalf("json lost the text: %+v", jobs)
	}

	// A hand-edited jobs.json whose job id carries an escape sequence.
	path := filepath.Join(home, "jobs.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), `"id":"report"`, `"id":"rep\u001b[8mort"`, 1)
	if edited == string(raw) {
		t.Fatalf("jobs.json has no id to edit:\n%s", raw)
	}
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, "jobs", "list", "--home", home)
	terminalSafe(t, "jobs list (edited id)", out)
	if !strings.Contains(out, `rep\x1b[8mort`) {
		t.Fatalf("jobs list does not show the edited id escaped:\n%s", out)
	}

	// The ledger: a run whose job id, run id and reason carry escapes.
	lg, err := ledger.Open(filepath.Join(home, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := lg.Append(context.Background(), ledger.Entry{
		Time: now, RunID: "run\u009b1m", JobID: "evil\x1b[2J", State: ledger.StateFailed, Slot: now.Truncate(time.Second),
		Trigger: "schedule", Reason: "boom \x1b[31mred\r\nsecond line\x07",
	}); err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, "runs", "list", "--home", home)
	terminalSafe(t, "runs list", out)
	if !strings.Contains(out, `evil\x1b[2J`) || !strings.Contains(out, `run\u009b1m`) || !strings.Contains(out, `boom \x1b[31mred\r second line\x07`) {
		t.Fatalf("runs list does not show the run escaped:\n%s", out)
	}
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	writeFile(t, cfg, "home: "+home+"\n")
	out = mustCLI(t, "agent", "status", "--config", cfg)
	terminalSafe(t, "agent status", out)
	if !strings.Contains(out, `evil\x1b[2J`) || !strings.Contains(out, `boom \x1b[31mred\r second line\x07`) {
		t.Fatalf("agent status does not show the run escaped:\n%s", out)
	}

	// Errors carry user text too: an unknown id is echoed escaped.
	code, stdout, stderr := cli(t, "jobs", "rm", "--home", home, "no\x1b[2Jsuch")
	if code == 0 {
		t.Fatalf("rm of an unknown job succeeded: %s", stdout)
	}
	terminalSafe(t, "jobs rm error", stderr)
}

// TestJobsAddRefusesInvalidUTF8 pins that text which JSON would store as
// U+FFFD (so another command would run) is refused when the job is added.
func TestJobsAddRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	for _, args := range [][]string{
		{"--schedule", "every 1h", "--", "echo caf\xe9"},
		{"--schedule", "every 1h", "--", "echo", "caf\xe9"},
		{"--name", "caf\xe9", "--schedule", "every 1h", "--", "true"},
		{"--env", "X=caf\xe9", "--schedule", "every 1h", "--", "true"},
	} {
		code, out, errOut := cli(t, append([]string{"jobs", "add", "--home", home}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "is not valid UTF-8 text") {
			t.Fatalf("jobs add %q: exit %d, stderr %q, want exit %d naming the text", args, code, errOut, exitUsage)
		}
		terminalSafe(t, "jobs add error", errOut)
		if out != "" {
			t.Fatalf("jobs add %q printed %q", args, out)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "jobs.json")); err == nil {
		if out := mustCLI(t, "jobs", "list", "--home", home, "--json"); strings.TrimSpace(out) != "[]" {
			t.Fatalf("a refused job was stored: %s", out)
		}
	}
}

// TestDLQListEscapesTheAgentsAnswer: a dead letter's reason quotes what the
// agent answered, which is remote text; the table shows it escaped.
func TestDLQListEscapesTheAgentsAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/operator/dlq" || r.Header.Get("Authorization") != "Bearer op" {
			http.Error(w, `{"error":"not_found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"entries":[{"schedule_id":"sch_1","agent_id":"agent-a","job_id":"j","fire_at":"2026-06-18T09:00:00Z",` +
			`"attempts":1,"reason":"rejected by the agent: agent answered 400 \u001b]0;owned\u0007","failed_at":"2026-06-18T09:00:01Z"}],"next_cursor":null}`))
	}))
	defer srv.Close()
	out := mustCLI(t, "dlq", "list", "--nas-url", srv.URL, "--operator-token", "op")
	terminalSafe(t, "dlq list", out)
	if !strings.Contains(out, `agent answered 400 \x1b]0;owned\x07`) || !strings.Contains(out, "2026-06-18T09:00:00Z") {
		t.Fatalf("dlq list does not show the reason escaped:\n%s", out)
	}
}
