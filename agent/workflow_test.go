package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
)

// TestWorkflowDecides: a workflow decides from the ledger at its fire time
// which of run, skip and fail its dependencies call for.
func TestWorkflowDecides(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		depA      string // "ok", "fail" or "" (no run)
		onMissing job.Decision
		onDepFail job.Decision
		state     ledger.State
		reason    string
		ran       bool
	}{
		{"all succeeded", "ok", "", "", ledger.StateSucceeded, "", true},
		{"missing, skip", "", job.DecisionSkip, "", ledger.StateSkipped, "workflow skipped: dependencies within 1h0m0s: a missing, b succeeded", false},
		{"missing, fail", "", job.DecisionFail, "", ledger.StateFailed, "workflow failed: dependencies within 1h0m0s: a missing, b succeeded", false},
		{"missing, run", "", job.DecisionRun, "", ledger.StateSucceeded, "", true},
		{"dep failed, skip", "fail", "", job.DecisionSkip, ledger.StateSkipped, "a failed", false},
		{"dep failed, fail", "fail", "", job.DecisionFail, ledger.StateFailed, "workflow failed: dependencies within 1h0m0s: a failed, b succeeded", false},
		{"dep failed, run", "fail", "", job.DecisionRun, ledger.StateSucceeded, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, JobSpec{ID: "a", Schedule: "@yearly", Payload: shell(map[string]string{"ok": "true", "fail": "false", "": "true"}[c.depA])})
			b.add(t, JobSpec{ID: "b", Schedule: "@yearly", Payload: shell("true")})
			if c.depA != "" {
				b.runNow(t, "a")
			}
			b.runNow(t, "b")
			b.add(t, JobSpec{ID: "w", Schedule: "@yearly", Payload: shell("echo digest"), JobKind: job.JobKindWorkflow,
				Workflow: &job.Workflow{DependsOn: []string{"a", "b"}, Window: job.Duration(time.Hour), OnMissing: c.onMissing, OnDepFail: c.onDepFail}})
			r := b.runNow(t, "w")
			if r.State != c.state || !strings.Contains(r.Reason, c.reason) {
				t.Fatalf("workflow %s %q, want %s %q", r.State, r.Reason, c.state, c.reason)
			}
			if ran := r.StartedAt != (time.Time{}) && r.Result() == "exit 0"; ran != c.ran {
				t.Fatalf("command ran %v, want %v (%+v)", ran, c.ran, r)
			}
			j := b.job(t, "w")
			if c.state == ledger.StateSkipped && (j.LastStatus != "skipped" || j.FailureStreak != 0) {
				t.Fatalf("skipped run left status %q streak %d", j.LastStatus, j.FailureStreak)
			}
		})
	}
}

// TestWorkflowWindow: a dependency run older than the window is missing.
func TestWorkflowWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "a", Schedule: "@yearly", Payload: shell("true")})
	b.runNow(t, "a")
	b.clock.Add(2 * time.Hour)
	b.add(t, JobSpec{ID: "w", Schedule: "@yearly", Payload: shell("true"), JobKind: job.JobKindWorkflow,
		Workflow: &job.Workflow{DependsOn: []string{"a"}, Window: job.Duration(time.Hour)}})
	if r := b.runNow(t, "w"); r.State != ledger.StateSkipped || !strings.Contains(r.Reason, "a missing") {
		t.Fatalf("workflow %s %q, want skipped with a missing", r.State, r.Reason)
	}
}

// TestJobKindValidation: bad kind settings are refused and change nothing.
func TestJobKindValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	items := writeItems(t, []string{"x"})
	cases := []struct {
		name string
		spec JobSpec
		want string
	}{
		{"unknown kind", JobSpec{JobKind: "dag"}, "must be one of plain, workflow, fanout"},
		{"workflow without deps", JobSpec{JobKind: job.JobKindWorkflow}, "needs depends_on"},
		{"workflow on itself", JobSpec{ID: "w", JobKind: job.JobKindWorkflow, Workflow: &job.Workflow{DependsOn: []string{"w"}, Window: job.Duration(time.Hour)}}, "names the job itself"},
		{"workflow without window", JobSpec{JobKind: job.JobKindWorkflow, Workflow: &job.Workflow{DependsOn: []string{"a"}}}, "window must be a positive"},
		{"workflow bad decision", JobSpec{JobKind: job.JobKindWorkflow, Workflow: &job.Workflow{DependsOn: []string{"a"}, Window: job.Duration(time.Hour), OnMissing: "maybe"}}, "on_missing \"maybe\""},
		{"fanout settings on a plain job", JobSpec{Fanout: &job.Fanout{InputsFrom: items}}, "need kind fanout"},
		{"fanout without inputs", JobSpec{JobKind: job.JobKindFanout}, "needs inputs_from"},
		{"fanout relative file", JobSpec{JobKind: job.JobKindFanout, Fanout: &job.Fanout{InputsFrom: "file://items.txt"}}, "names a local file"},
		{"fanout relative path", JobSpec{JobKind: job.JobKindFanout, Fanout: &job.Fanout{InputsFrom: "file:items.txt"}}, "absolute"},
		{"fanout private http", JobSpec{JobKind: job.JobKindFanout, Fanout: &job.Fanout{InputsFrom: "http://127.0.0.1:8080/items"}}, "not a public address"},
		{"fanout unregistered sql", JobSpec{JobKind: job.JobKindFanout, Fanout: &job.Fanout{InputsFrom: "sql://main?SELECT 1"}}, "not registered"},
		{"fanout bad concurrency", JobSpec{JobKind: job.JobKindFanout, Fanout: &job.Fanout{InputsFrom: items, Concurrency: -1}}, "concurrency"},
		{"fanout bad tolerance", JobSpec{JobKind: job.JobKindFanout, Fanout: &job.Fanout{InputsFrom: items, PartialTolerance: 1.5}}, "partial_tolerance"},
		{"fanout bad item var", JobSpec{JobKind: job.JobKindFanout, Fanout: &job.Fanout{InputsFrom: items, ItemVar: "A-B"}}, "item_var"},
		{"fanout bad reducer", JobSpec{JobKind: job.JobKindFanout, Fanout: &job.Fanout{InputsFrom: items, Reducer: &job.Reducer{Command: "true", RunOn: "never"}}}, "run_on"},
	}
	for _, c := range cases {
		c.spec.Schedule = "@yearly"
		c.spec.Payload = shell("true")
		_, _, err := b.rt.AddJob(t.Context(), c.spec)
		if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if js, _ := b.rt.Jobs(t.Context()); len(js) != 0 {
		t.Fatalf("%d jobs stored after refused adds", len(js))
	}
}

// TestEditKeepsJobKind: editing a workflow or fanout job keeps its kind
// and settings.
func TestEditKeepsJobKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.add(t, JobSpec{ID: "w", Schedule: "@yearly", JobKind: job.JobKindWorkflow,
		Workflow: &job.Workflow{DependsOn: []string{"a"}, Window: job.Duration(time.Hour), OnDepFail: job.DecisionFail}})
	b.add(t, JobSpec{ID: "f", Schedule: "@yearly", JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: writeItems(t, []string{"x"}), Concurrency: 3, Reducer: &job.Reducer{Command: "true"}}})
	sched := "@daily"
	for _, id := range []string{"w", "f"} {
		if _, _, err := b.rt.EditJob(t.Context(), id, JobPatch{Schedule: &sched}); err != nil {
			t.Fatal(err)
		}
	}
	if w := b.job(t, "w"); w.JobKind != job.JobKindWorkflow || w.Workflow == nil || w.Workflow.OnDepFail != job.DecisionFail || w.Kind != "cron" {
		t.Fatalf("edited workflow: kind %q %+v (schedule kind %q)", w.JobKind, w.Workflow, w.Kind)
	}
	if f := b.job(t, "f"); f.JobKind != job.JobKindFanout || f.Fanout == nil || f.Fanout.Concurrency != 3 || f.Fanout.Reducer.RunOn != job.ReduceOnSuccess {
		t.Fatalf("edited fanout: kind %q %+v", f.JobKind, f.Fanout)
	}
}
