package jobfile_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/jobfile"
	"github.com/chronoscron/chronos/agent/store"
)

func TestParseFanoutYAML(t *testing.T) {
	spec, err := jobfile.Parse([]byte(`
id: scan-targets
schedule: "0 6 * * *"
kind: fanout
inputs_from: file:///etc/targets.txt
concurrency: 4
per_item_timeout: 30m
partial_tolerance: 0.1
command: nuclei -u "$FANOUT_ITEM"
env: {B: "2", A: "1"}
retry: {max_attempts: 2, backoff: 5s}
reducer: {command: digest, run_on: any_success}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := spec.Fanout
	if spec.JobKind != agent.JobKindFanout || f == nil || f.Concurrency != 4 || f.PerItemTimeout.Std() != 30*time.Minute ||
		f.PartialTolerance != 0.1 || f.Reducer.RunOn != store.ReduceOnAnySuccess || spec.Retry.MaxAttempts != 2 || spec.Retry.Backoff.Std() != 5*time.Second {
		t.Fatalf("spec %+v fanout %+v", spec, f)
	}
	if sh := spec.Payload.Shell; sh == nil || sh.Command != `nuclei -u "$FANOUT_ITEM"` || sh.Env["A"] != "1" || sh.Env["B"] != "2" {
		t.Fatalf("payload %+v", spec.Payload.Shell)
	}
}

func TestParseWorkflowJSON(t *testing.T) {
	spec, err := jobfile.Parse([]byte(`{"id": "digest", "schedule": "@daily", "kind": "workflow",
		"depends_on": ["a", "b"], "window": "24h", "on_missing": "fail", "command": ["/opt/digest", "--all"]}`))
	if err != nil {
		t.Fatal(err)
	}
	w := spec.Workflow
	if spec.JobKind != agent.JobKindWorkflow || w == nil || len(w.DependsOn) != 2 || w.Window.Std() != 24*time.Hour ||
		w.OnMissing != store.DecisionFail || spec.Window != "" {
		t.Fatalf("spec %+v workflow %+v", spec, w)
	}
	if sh := spec.Payload.Shell; sh == nil || len(sh.Argv) != 2 {
		t.Fatalf("payload %+v", spec.Payload.Shell)
	}
}

func TestParseRefuses(t *testing.T) {
	for body, want := range map[string]string{
		"": "empty",
		"id: x\nschedule: '@daily'\ncommand: true\nconcurency: 2\n":          "concurency",
		"id: x\nschedule: '@daily'\ncommand: true\ntimeout: soon\n":          "timeout \"soon\" is not a duration",
		"id: x\nschedule: '@daily'\ncommand: true\ninputs_from: file:///x\n": "inputs_from needs kind fanout",
		"id: x\nschedule: '@daily'\ncommand: {a: b}\n":                       "command must be",
		"id: x\nschedule: '@daily'\n":                                        "give a command or an HTTP URL",
	} {
		_, err := jobfile.Parse([]byte(body))
		if !errors.Is(err, agent.ErrInvalidJob) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", body, err, want)
		}
	}
}
