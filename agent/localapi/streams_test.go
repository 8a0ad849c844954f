package localapi_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/output"
)

// TestRunOutputStreamsApart: a run's detail has its standard output and
// standard error apart besides the output as it came; a run whose output
// file has no streams file (recorded before the agent kept them apart)
// reads as one stream, as before.
func TestRunOutputStreamsApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("both", `echo "to stdout"; echo "to stderr" >&2; exit 4`), nil)
	var run localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/both/run", `{"force":false,"wait":true}`, &run)
	var d localapi.RunDetail
	e.must(t, http.StatusOK, "GET", "/api/runs/"+run.RunID, "", &d)
	if !d.StreamsApart || d.StdoutText != "to stdout\n" || d.StderrText != "to stderr\n" ||
		!strings.Contains(d.OutputText, "to stdout\n") || !strings.Contains(d.OutputText, "to stderr\n") {
		t.Fatalf("detail: apart %v stdout %q stderr %q output %q", d.StreamsApart, d.StdoutText, d.StderrText, d.OutputText)
	}
	if err := os.Remove(output.StreamsFile(filepath.Join(e.home, run.Output))); err != nil {
		t.Fatal(err)
	}
	d = localapi.RunDetail{}
	e.must(t, http.StatusOK, "GET", "/api/runs/"+run.RunID, "", &d)
	if d.StreamsApart || d.StdoutText != "" || d.StderrText != "" || len(d.OutputText) != len("to stdout\nto stderr\n") {
		t.Fatalf("a file recorded as one stream: apart %v stdout %q stderr %q output %q", d.StreamsApart, d.StdoutText, d.StderrText, d.OutputText)
	}
}

// TestRunsTopLevel: top_level=true leaves a fanout's children and reducer
// out of a job's runs, so that each page holds whole runs.
func TestRunsTopLevel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	items := filepath.Join(t.TempDir(), "items.txt")
	if err := os.WriteFile(items, []byte("alpha\nbravo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.must(t, http.StatusCreated, "POST", "/api/jobs", specJSON(t, localapi.JobSpec{ID: "fan", Schedule: "@daily",
		Payload: sh(`echo "$FANOUT_ITEM"`), JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: "file://" + items, Reducer: &job.Reducer{Command: "echo reduced", RunOn: job.ReduceOnAnySuccess}}}), nil)
	var parents []string
	for range 2 {
		var r localapi.RunInfo
		e.must(t, http.StatusOK, "POST", "/api/jobs/fan/run", `{"force":true,"wait":true}`, &r)
		parents = append([]string{r.RunID}, parents...)
	}
	var all, top localapi.RunList
	e.must(t, http.StatusOK, "GET", "/api/runs?job_id=fan", "", &all)
	if len(all.Runs) != 8 {
		t.Fatalf("%d runs in all, want 2 parents with 2 children and a reducer each", len(all.Runs))
	}
	e.must(t, http.StatusOK, "GET", "/api/runs?job_id=fan&top_level=true&limit=1", "", &top)
	if len(top.Runs) != 1 || top.Runs[0].RunID != parents[0] || top.Runs[0].Role != ledger.RoleParent || top.NextCursor == "" {
		t.Fatalf("first page of whole runs: %+v next %q", top.Runs, top.NextCursor)
	}
	e.must(t, http.StatusOK, "GET", "/api/runs?job_id=fan&top_level=true&limit=1&cursor="+top.NextCursor, "", &top)
	if len(top.Runs) != 1 || top.Runs[0].RunID != parents[1] {
		t.Fatalf("second page of whole runs: %+v", top.Runs)
	}
}
