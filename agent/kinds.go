package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/job"
)

// MaxConcurrency bounds a fanout's concurrency.
const MaxConcurrency = 256

// checkKind validates spec's job kind and its settings into j: a workflow
// names existing-looking job ids other than its own and a positive window;
// a fanout has an inputs_from its resolver accepts (a private http address
// is refused unless the address policy allows it, a sql:// name must be
// registered), a concurrency, a tolerance in [0, 1] and a valid reducer.
func (e jobEnv) checkKind(j *job.Job, spec JobSpec) error {
	kind, err := job.ParseJobKind(spec.JobKind)
	if err != nil {
		return err
	}
	switch {
	case kind != job.JobKindWorkflow && spec.Workflow != nil:
		return errors.New("workflow settings (depends_on, window, on_missing, on_dep_fail) need kind workflow")
	case kind != job.JobKindFanout && spec.Fanout != nil:
		return errors.New("fanout settings (inputs_from, concurrency, ...) need kind fanout")
	}
	j.JobKind = kind
	switch kind {
	case job.JobKindWorkflow:
		if spec.Workflow == nil {
			return errors.New("kind workflow needs depends_on")
		}
		w, err := checkWorkflow(j.ID, *spec.Workflow)
		if err != nil {
			return err
		}
		j.Workflow = &w
	case job.JobKindFanout:
		if spec.Fanout == nil {
			return errors.New("kind fanout needs inputs_from")
		}
		f, err := e.checkFanout(*spec.Fanout)
		if err != nil {
			return err
		}
		j.Fanout = &f
	}
	return nil
}

func checkWorkflow(self string, w job.Workflow) (job.Workflow, error) {
	if len(w.DependsOn) == 0 {
		return w, errors.New("workflow: depends_on names no job")
	}
	deps := make([]string, 0, len(w.DependsOn))
	for _, d := range w.DependsOn {
		d = strings.TrimSpace(d)
		if err := job.ValidID(d); err != nil {
			return w, fmt.Errorf("workflow: depends_on: %w", err)
		}
		if d == self {
			return w, fmt.Errorf("workflow: depends_on names the job itself (%s)", d)
		}
		if slices.Contains(deps, d) {
			return w, fmt.Errorf("workflow: depends_on names %s twice", d)
		}
		deps = append(deps, d)
	}
	w.DependsOn = deps
	if w.Window <= 0 {
		return w, errors.New("workflow: window must be a positive duration (how far back to look for each dependency's run)")
	}
	var err error
	if w.OnMissing, err = job.ParseDecision("on_missing", string(w.OnMissing)); err != nil {
		return w, fmt.Errorf("workflow: %w", err)
	}
	if w.OnDepFail, err = job.ParseDecision("on_dep_fail", string(w.OnDepFail)); err != nil {
		return w, fmt.Errorf("workflow: %w", err)
	}
	return w, nil
}

func (e jobEnv) checkFanout(f job.Fanout) (job.Fanout, error) {
	f.InputsFrom = strings.TrimSpace(f.InputsFrom)
	if e.inputs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.inputs.Check(ctx, f.InputsFrom); err != nil {
			return f, fmt.Errorf("fanout: %w", err)
		}
	} else if f.InputsFrom == "" {
		return f, errors.New("fanout: inputs_from is empty")
	}
	if f.Concurrency == 0 {
		f.Concurrency = 1
	}
	if f.Concurrency < 1 || f.Concurrency > MaxConcurrency {
		return f, fmt.Errorf("fanout: concurrency %d must be between 1 and %d", f.Concurrency, MaxConcurrency)
	}
	if f.PerItemTimeout < 0 {
		return f, fmt.Errorf("fanout: per_item_timeout %s must not be negative", f.PerItemTimeout.Std())
	}
	if f.PartialTolerance < 0 || f.PartialTolerance > 1 || f.PartialTolerance != f.PartialTolerance {
		return f, fmt.Errorf("fanout: partial_tolerance %g must be between 0 and 1", f.PartialTolerance)
	}
	f.ItemVar = strings.TrimSpace(f.ItemVar)
	if f.ItemVar == "" {
		f.ItemVar = job.DefaultItemVar
	}
	if !validEnvName(f.ItemVar) {
		return f, fmt.Errorf("fanout: item_var %q must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", f.ItemVar)
	}
	if f.Reducer != nil {
		r := *f.Reducer
		r.Command = strings.TrimSpace(r.Command)
		if r.Command == "" {
			return f, errors.New("fanout: reducer command is empty")
		}
		var err error
		if r.RunOn, err = job.ParseReducerOn(string(r.RunOn)); err != nil {
			return f, fmt.Errorf("fanout: %w", err)
		}
		f.Reducer = &r
	}
	return f, nil
}

func validEnvName(s string) bool {
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// KindDetails lists, label and value, what a person reads about j's job
// kind (none for a plain job).
func KindDetails(j *job.Job) [][2]string {
	switch {
	case j.JobKind == job.JobKindWorkflow && j.Workflow != nil:
		w := j.Workflow
		return [][2]string{{"kind", "workflow"}, {"depends on", strings.Join(w.DependsOn, ", ")},
			{"window", fmt.Sprintf("%s (on_missing %s, on_dep_fail %s)", w.Window.Std(), w.OnMissing, w.OnDepFail)}}
	case j.JobKind == job.JobKindFanout && j.Fanout != nil:
		f := j.Fanout
		timeout := "none"
		if f.PerItemTimeout > 0 {
			timeout = f.PerItemTimeout.Std().String()
		}
		rows := [][2]string{{"kind", "fanout"}, {"inputs from", f.InputsFrom},
			{"children", fmt.Sprintf("concurrency %d, item in $%s, partial tolerance %g, per-item timeout %s, attempts %d each",
				f.Concurrency, f.ItemVar, f.PartialTolerance, timeout, j.Retry.ChildAttempts())}}
		if f.Reducer != nil {
			rows = append(rows, [2]string{"reducer", fmt.Sprintf("%s (run on %s)", f.Reducer.Command, f.Reducer.RunOn)})
		}
		return rows
	}
	return nil
}
