package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRunsListShowsResult runs a failing shell job, a forced rerun and an
// http job through the CLI and checks that runs list shows, per run, the
// forced flag, the exit or HTTP status, the duration and the output path,
// with the table still aligned, and that --json keeps every field.
func TestRunsListShowsResult(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	mustCLI(t, "jobs", "add", "--home", home, "--id", "fail3", "--schedule", "every 1h", "--window", "daily",
		"--", `echo "partial"; exit 3`)
	mustCLI(t, "jobs", "add", "--home", home, "--id", "hook", "--schedule", "every 1h", "--http-url", srv.URL)
	if code, out, errOut := cli(t, "jobs", "run", "--home", home, "fail3"); code == 0 {
		t.Fatalf("failing job ran with exit 0:\n%s%s", out, errOut)
	}
	cli(t, "jobs", "run", "--home", home, "fail3", "--force")
	cli(t, "jobs", "run", "--home", home, "hook")

	var runs []map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("want 3 runs, got %d: %v", len(runs), runs)
	}
	for i, r := range runs {
		for _, k := range []string{"run_id", "job_id", "state", "slot", "trigger", "lateness_ms", "runner", "output",
			"exit_code", "error", "first_at", "last_at", "started_at", "duration_ms", "states"} {
			if _, ok := r[k]; !ok {
				t.Errorf("run %d: --json lacks %q: %v", i, k, r)
			}
		}
	}
	if runs[0]["forced"] == true || runs[1]["forced"] != true {
		t.Errorf("forced flags in --json: %v, %v", runs[0]["forced"], runs[1]["forced"])
	}
	if runs[0]["exit_code"] != float64(3) || runs[2]["exit_code"] != float64(503) || runs[2]["runner"] != "http" {
		t.Errorf("statuses in --json: %v %v %v", runs[0]["exit_code"], runs[2]["exit_code"], runs[2]["runner"])
	}

	out := mustCLI(t, "runs", "list", "--home", home)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 rows:\n%s", out)
	}
	head := lines[0]
	col := func(line, name string) string {
		i := strings.Index(head, name)
		if i < 0 {
			t.Fatalf("header lacks %s: %s", name, head)
		}
		rest := line[i:]
		if j := strings.IndexByte(rest, ' '); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	want := []struct{ job, forced, result string }{
		{"fail3", "-", "exit"}, {"fail3", "yes", "exit"}, {"hook", "-", "http"},
	}
	codes := []string{"3", "3", "503"}
	dur := regexp.MustCompile(`^[0-9.]+(ns|µs|ms|s|m|h)+$|^0s$`)
	for i, w := range want {
		row := lines[i+1]
		if got := col(row, "JOB"); got != w.job {
			t.Errorf("row %d JOB %q, want %q (columns misaligned?)\n%s", i, got, w.job, out)
		}
		if got := col(row, "FORCED"); got != w.forced {
			t.Errorf("row %d FORCED %q, want %q\n%s", i, got, w.forced, out)
		}
		if got := col(row, "RESULT"); got != w.result {
			t.Errorf("row %d RESULT %q, want %q\n%s", i, got, w.result, out)
		}
		if got := strings.Fields(row[strings.Index(head, "RESULT"):])[1]; got != codes[i] {
			t.Errorf("row %d status %q, want %q\n%s", i, got, codes[i], out)
		}
		if got := col(row, "DURATION"); !dur.MatchString(got) {
			t.Errorf("row %d DURATION %q is not a duration\n%s", i, got, out)
		}
		path := col(row, "OUTPUT")
		if !filepath.IsAbs(path) || !strings.HasPrefix(path, home) {
			t.Errorf("row %d OUTPUT %q is not a path in the home\n%s", i, path, out)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("row %d OUTPUT: %v", i, err)
		}
	}
	if b, err := os.ReadFile(col(lines[1], "OUTPUT")); err != nil || string(b) != "partial\n" {
		t.Errorf("output file of the first run: %q, %v", b, err)
	}
}

// TestRunsListEscapesPaths: the output path (under a home whose name holds
// a terminal escape) is printed escaped in the table, raw in --json.
func TestRunsListEscapesPaths(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home\x1b[2J")
	mustCLI(t, "jobs", "add", "--home", home, "--id", "esc", "--schedule", "every 1h", "--", "true")
	mustCLI(t, "jobs", "run", "--home", home, "esc")
	out := mustCLI(t, "runs", "list", "--home", home)
	if strings.Contains(out, "\x1b") || !strings.Contains(out, `home\x1b[2J`+string(filepath.Separator)+"output") {
		t.Fatalf("table does not escape the output path:\n%q", out)
	}
	var runs []struct{ Output string }
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || !strings.HasPrefix(runs[0].Output, "output"+string(filepath.Separator)+"esc") {
		t.Fatalf("--json output %+v", runs)
	}
}

// TestRunsPrintOutput: runs show names the output file by its full path
// and prints the run's output with --output; runs list --output prints
// every listed run's output under a line naming it; a run that kept no
// output is an error.
func TestRunsPrintOutput(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "talk", "--schedule", "every 1h", "--", `echo "to stdout"; echo "to stderr" >&2`)
	mustCLI(t, "jobs", "add", "--home", home, "--id", "hush", "--schedule", "every 1h", "--", `echo "second"`)
	mustCLI(t, "jobs", "run", "--home", home, "talk")
	mustCLI(t, "jobs", "run", "--home", home, "hush")
	var runs []struct {
		RunID  string `json:"run_id"`
		JobID  string `json:"job_id"`
		Output string `json:"output"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "runs", "list", "--home", home, "--json")), &runs); err != nil || len(runs) != 2 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	show := mustCLI(t, "runs", "show", "--home", home, runs[0].RunID)
	if want := "output:   " + filepath.Join(home, runs[0].Output) + "\n"; !strings.Contains(show, want) {
		t.Errorf("runs show does not name the output file by its path %q:\n%s", want, show)
	}
	if got := mustCLI(t, "runs", "show", "--home", home, runs[0].RunID, "--output"); !strings.Contains(got, "to stdout\n") || !strings.Contains(got, "to stderr\n") {
		t.Errorf("runs show --output printed %q", got)
	}
	list := mustCLI(t, "runs", "list", "--home", home, "--output")
	want := "==> " + runs[0].RunID + " talk succeeded <==\n"
	second := "==> " + runs[1].RunID + " hush succeeded <==\nsecond\n"
	if !strings.HasPrefix(list, want) || !strings.HasSuffix(list, second) {
		t.Errorf("runs list --output printed:\n%s", list)
	}
	if err := os.Remove(filepath.Join(home, runs[1].Output)); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cli(t, "runs", "show", "--home", home, runs[1].RunID, "--output"); code != 1 || !strings.Contains(errOut, runs[1].RunID) {
		t.Errorf("runs show --output of a run whose output is gone: exit %d, %s", code, errOut)
	}
}
