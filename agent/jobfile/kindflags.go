package jobfile

import (
	"fmt"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"

	"github.com/spf13/pflag"
)

// KindFlags are the job kind flags of jobs add.
type KindFlags struct {
	Kind             string
	DependsOn        []string
	OnMissing        string
	OnDepFail        string
	InputsFrom       string
	Concurrency      int
	PerItemTimeout   time.Duration
	PartialTolerance float64
	ItemVar          string
	Reducer          string
	ReducerRunOn     string
}

// Register adds the flags to f. A workflow's look-back window is the
// --window flag given a duration (24h); the idempotency window names
// (hourly, daily, ...) are not durations.
func (k *KindFlags) Register(f *pflag.FlagSet) {
	f.StringVar(&k.Kind, "kind", "", "job kind: plain (default), workflow (--depends-on, --window DURATION, --on-missing, --on-dep-fail) or fanout (--inputs-from ...)")
	f.StringSliceVar(&k.DependsOn, "depends-on", nil, "workflow: job ids that must have succeeded within --window")
	f.StringVar(&k.OnMissing, "on-missing", "", "workflow: a dependency without a run in the window: skip (default), fail, run")
	f.StringVar(&k.OnDepFail, "on-dep-fail", "", "workflow: a dependency whose latest run failed: skip (default), fail, run")
	f.StringVar(&k.InputsFrom, "inputs-from", "", "fanout: file:///PATH, http(s)://URL, job://ID?output_as_lines or sql://NAME?QUERY")
	f.IntVar(&k.Concurrency, "concurrency", 1, "fanout: children running at once")
	f.DurationVar(&k.PerItemTimeout, "per-item-timeout", 0, "fanout: stop a child after this long (0: no limit)")
	f.Float64Var(&k.PartialTolerance, "partial-tolerance", 0, "fanout: share of children that may fail with the parent still a success (partial)")
	f.StringVar(&k.ItemVar, "item-var", "", "fanout: environment variable holding a child's item (default FANOUT_ITEM)")
	f.StringVar(&k.Reducer, "reducer", "", "fanout: shell command run after all children")
	f.StringVar(&k.ReducerRunOn, "reducer-run-on", "", "fanout: when the reducer runs: success (default), always, any_success")
}

// workflowOnly and fanoutOnly name the flags each kind takes.
var (
	workflowOnly = []string{"depends-on", "on-missing", "on-dep-fail"}
	fanoutOnly   = []string{"inputs-from", "concurrency", "per-item-timeout", "partial-tolerance", "item-var", "reducer", "reducer-run-on"}
)

// Apply sets spec's kind and settings from the flags; changed tells which
// were given (pflag.FlagSet.Changed).
func (k *KindFlags) Apply(changed func(name string) bool, spec *agent.JobSpec) error {
	kind, err := job.ParseJobKind(k.Kind)
	if err != nil {
		return err
	}
	given := func(names []string) string {
		for _, n := range names {
			if changed(n) {
				return n
			}
		}
		return ""
	}
	if n := given(workflowOnly); n != "" && kind != job.JobKindWorkflow {
		return fmt.Errorf("--%s needs --kind workflow", n)
	}
	if n := given(fanoutOnly); n != "" && kind != job.JobKindFanout {
		return fmt.Errorf("--%s needs --kind fanout", n)
	}
	spec.JobKind = kind
	switch kind {
	case job.JobKindWorkflow:
		w := &job.Workflow{DependsOn: k.DependsOn, OnMissing: job.Decision(k.OnMissing), OnDepFail: job.Decision(k.OnDepFail)}
		if d, err := time.ParseDuration(strings.TrimSpace(spec.Window)); err == nil {
			w.Window, spec.Window = job.Duration(d), ""
		}
		spec.Workflow = w
	case job.JobKindFanout:
		spec.Fanout = &job.Fanout{InputsFrom: k.InputsFrom, Concurrency: k.Concurrency, PerItemTimeout: job.Duration(k.PerItemTimeout),
			PartialTolerance: k.PartialTolerance, ItemVar: k.ItemVar}
		if k.Reducer != "" || k.ReducerRunOn != "" {
			spec.Fanout.Reducer = &job.Reducer{Command: k.Reducer, RunOn: job.ReducerOn(k.ReducerRunOn)}
		}
	}
	return nil
}
