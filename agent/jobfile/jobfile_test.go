package jobfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"
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
	if spec.JobKind != job.JobKindFanout || f == nil || f.Concurrency != 4 || f.PerItemTimeout.Std() != 30*time.Minute ||
		f.PartialTolerance != 0.1 || f.Reducer.RunOn != job.ReduceOnAnySuccess || spec.Retry.MaxAttempts != 2 || spec.Retry.Backoff.Std() != 5*time.Second {
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
	if spec.JobKind != job.JobKindWorkflow || w == nil || len(w.DependsOn) != 2 || w.Window.Std() != 24*time.Hour ||
		w.OnMissing != job.DecisionFail || spec.Window != "" {
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

// TestReadLimit pins that a spec file or stream over the limit is refused
// with an error naming it, the limit and the setting, and that a file within
// it is read.
func TestReadLimit(t *testing.T) {
	t.Parallel()
	spec := "id: x\nschedule: '@daily'\ncommand: true\n"
	padded := spec + "#" + strings.Repeat(" ", 200) + "\n"
	lim := store.Limit{Bytes: 100, Setting: "max_spec_file_bytes"}
	for _, tc := range []struct {
		name, content string
		stdin         bool
		lim           store.Limit
		want          string // "" for no error
	}{
		{name: "file within", content: spec, lim: lim},
		{name: "file over", content: padded, lim: lim, want: "is 241 bytes, over the limit of 100 bytes set by max_spec_file_bytes"},
		{name: "stdin over", content: padded, stdin: true, lim: lim, want: "job file: - is more than 100 bytes, over the limit of 100 bytes set by max_spec_file_bytes"},
		{name: "default limit", content: padded, lim: store.Limit{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := "-"
			if !tc.stdin {
				path = filepath.Join(t.TempDir(), "job.yaml")
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := jobfile.Read(path, strings.NewReader(tc.content), tc.lim)
			if tc.want == "" {
				if err != nil || got.ID != "x" {
					t.Fatalf("read %+v, %v", got, err)
				}
				return
			}
			if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), tc.want) || (!tc.stdin && !strings.Contains(err.Error(), path)) {
				t.Fatalf("error %v, want ErrTooLarge with %q", err, tc.want)
			}
		})
	}
}
