package job

import (
	"fmt"
	"slices"
	"strings"
)

// Job kinds: what a run of a job does around its payload. The schedule's
// kind (cron, interval, once) is Job.Kind; the job kind is Job.JobKind, kept
// in its own field so that files and outputs written before job kinds
// existed read and show as they did.
const (
	// JobKindPlain runs the payload once per slot (an empty JobKind).
	JobKindPlain = ""
	// JobKindWorkflow runs the payload only when the jobs it depends on
	// succeeded within its window.
	JobKindWorkflow = "workflow"
	// JobKindFanout runs the payload once per input item, then a reducer.
	JobKindFanout = "fanout"
)

// ParseJobKind validates a job kind name; "" and "plain" are the plain kind.
func ParseJobKind(s string) (string, error) {
	switch k := strings.TrimSpace(s); k {
	case "", "plain":
		return JobKindPlain, nil
	case JobKindWorkflow, JobKindFanout:
		return k, nil
	}
	return "", fmt.Errorf("kind %q must be one of plain, workflow, fanout", s)
}

// Decision is what a workflow does when a dependency has no run in its
// window (on_missing) or its latest run failed (on_dep_fail).
type Decision string

// Workflow decisions.
const (
	// DecisionSkip records the run skipped, naming each dependency and its
	// status (the default).
	DecisionSkip Decision = "skip"
	// DecisionFail records the run failed.
	DecisionFail Decision = "fail"
	// DecisionRun runs the payload anyway.
	DecisionRun Decision = "run"
)

// ParseDecision validates a decision name ("" is skip); key names the
// setting in the error.
func ParseDecision(key, s string) (Decision, error) {
	switch d := Decision(strings.TrimSpace(s)); d {
	case "":
		return DecisionSkip, nil
	case DecisionSkip, DecisionFail, DecisionRun:
		return d, nil
	}
	return "", fmt.Errorf("%s %q must be one of skip, fail, run", key, s)
}

// Workflow is the fan-in of a workflow job: at each fire it looks in the
// ledger for each dependency's latest finished run within Window before
// the run.
type Workflow struct {
	DependsOn []string `json:"depends_on"`
	Window    Duration `json:"window"`
	OnMissing Decision `json:"on_missing"`
	OnDepFail Decision `json:"on_dep_fail"`
}

// ReducerOn says when a fanout's reducer runs.
type ReducerOn string

// Reducer conditions.
const (
	// ReduceOnSuccess runs the reducer when the parent succeeded (partial
	// included).
	ReduceOnSuccess ReducerOn = "success"
	// ReduceAlways runs the reducer whatever the children did, also for
	// zero items.
	ReduceAlways ReducerOn = "always"
	// ReduceOnAnySuccess runs the reducer when at least one child
	// succeeded.
	ReduceOnAnySuccess ReducerOn = "any_success"
)

// ParseReducerOn validates a reducer condition ("" is success).
func ParseReducerOn(s string) (ReducerOn, error) {
	switch r := ReducerOn(strings.TrimSpace(s)); r {
	case "":
		return ReduceOnSuccess, nil
	case ReduceOnSuccess, ReduceAlways, ReduceOnAnySuccess:
		return r, nil
	}
	return "", fmt.Errorf("reducer run_on %q must be one of success, always, any_success", s)
}

// Reducer is the step a fanout runs after all its children: a shell
// command, under the parent's timeout.
type Reducer struct {
	Command string    `json:"command"`
	RunOn   ReducerOn `json:"run_on"`
}

// DefaultItemVar is the environment variable naming a child's item.
const DefaultItemVar = "FANOUT_ITEM"

// Fanout is the fan-out of a fanout job: the payload runs once per item
// resolved from InputsFrom, at most Concurrency at once, each bounded by
// PerItemTimeout; the parent fails when more than PartialTolerance of the
// children failed.
type Fanout struct {
	InputsFrom       string   `json:"inputs_from"`
	Concurrency      int      `json:"concurrency"`
	PerItemTimeout   Duration `json:"per_item_timeout,omitempty"`
	PartialTolerance float64  `json:"partial_tolerance,omitempty"`
	ItemVar          string   `json:"item_var"`
	Reducer          *Reducer `json:"reducer,omitempty"`
}

// cloneKinds deep-copies the job kind settings of c (a shallow copy).
func (c *Job) cloneKinds() {
	if c.Workflow != nil {
		w := *c.Workflow
		w.DependsOn = slices.Clone(w.DependsOn)
		c.Workflow = &w
	}
	if c.Fanout != nil {
		f := *c.Fanout
		if f.Reducer != nil {
			r := *f.Reducer
			f.Reducer = &r
		}
		c.Fanout = &f
	}
}

// ReducerRunOn is f's reducer condition (success without a reducer).
func (f *Fanout) ReducerRunOn() ReducerOn {
	if f == nil || f.Reducer == nil {
		return ReduceOnSuccess
	}
	return f.Reducer.RunOn
}

// ChildAttempts is how many attempts each fanout child has under r: its
// max_attempts, else one.
func (r Retry) ChildAttempts() int { return max(r.MaxAttempts, 1) }
