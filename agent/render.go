package agent

import (
	"fmt"
	"io"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/internal/termtext"
)

// jobTableHeader names the columns of WriteJobTable.
var jobTableHeader = []string{"ID", "NAME", "SCHEDULE", "STATE", "NEXT", "LAST RUN", "LAST STATUS", "NOTIFY"}

// WriteJobTable writes jobs as a table, one line per job: its state (with
// why it is paused), next and last fire in its zone, last status and the
// kinds of its notify targets.
func WriteJobTable(w io.Writer, jobs []job.Job) error {
	rows := make([][]string, 0, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		state := JobState(j)
		if state == "paused" && j.PausedReason != "" {
			state += " (" + j.PausedReason + ")"
		}
		rows = append(rows, []string{j.ID, dash(j.Name), j.Schedule, state,
			JobTime(j, j.NextRunAt), JobTime(j, j.LastRunAt), dash(j.LastStatus), j.Policy.Kinds()})
	}
	return termtext.Table(w, jobTableHeader, rows)
}

// WriteDetail writes the job's details and notify policy, one "label:
// value" line each.
func (v *JobView) WriteDetail(w io.Writer) error {
	var rows [][]string
	for _, r := range append(v.Details(), v.Policy.Describe(v.NotifyStreak)...) {
		rows = append(rows, []string{r[0] + ":", r[1]})
	}
	return termtext.Table(w, nil, rows)
}

// WriteSaved writes, for a person, what was saved: job v (verb is "added"
// or "edited"), how its schedule was understood, its flexible window if it
// has one, its notify targets and its next fires (next), or that it is
// paused.
func WriteSaved(w io.Writer, verb string, v JobView, next []time.Time) error {
	esc := func(s string) string { return termtext.Escape(s, termtext.EscapeNewlines) }
	fmt.Fprintf(w, "%s job %s\nschedule: %s\n", verb, esc(v.ID), esc(v.Describe))
	if v.Flex > 0 {
		fmt.Fprintf(w, "flex: %s\n", DescribeFlex(&v.Job))
	}
	for _, t := range v.Policy.Targets {
		fmt.Fprintf(w, "notify: %s\n", esc(t.Spec()))
	}
	if v.NextRunAt == nil {
		_, err := fmt.Fprintln(w, "paused: no fires until resumed")
		return err
	}
	fmt.Fprintln(w, "next fires:")
	for _, at := range next {
		fmt.Fprintf(w, "  %s\n", at.Format(time.RFC3339))
	}
	return nil
}
