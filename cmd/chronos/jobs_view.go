package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chronoscron/chronos/agent"
)

// jobJSON is a job as the CLI prints it in JSON: the stored job plus its
// state and how its schedule is understood. The fields a reader looks for
// are always present (empty or null until they have a value), while
// jobs.json leaves them out.
type jobJSON struct {
	agent.Job
	Name         string     `json:"name"`
	PausedReason string     `json:"paused_reason"`
	LastRunAt    *time.Time `json:"last_run_at"`
	LastStatus   string     `json:"last_status"`
	LastError    string     `json:"last_error"`
	FinishedAt   *time.Time `json:"finished_at"`
	State        string     `json:"state"`
	Describe     string     `json:"describe,omitempty"`
}

func jobState(j *agent.Job) string {
	switch {
	case j.FinishedAt != nil:
		return "finished"
	case !j.Enabled:
		return "paused"
	case len(j.Claims) > 0:
		return "running"
	}
	return "scheduled"
}

func jobView(rt *agent.Runtime, j *agent.Job) jobJSON {
	v := jobJSON{Job: *j, State: jobState(j),
		Name: j.Name, PausedReason: j.PausedReason, LastRunAt: j.LastRunAt,
		LastStatus: j.LastStatus, LastError: j.LastError, FinishedAt: j.FinishedAt}
	if s, err := rt.Schedule(j); err == nil {
		v.Describe = s.Describe()
	}
	return v
}

func jobsJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// jobTime formats t in j's zone, the zone its schedule is read in, so a
// 09:00 Paris job shows 09:00+01:00 as jobs add printed it.
func jobTime(j *agent.Job, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	loc, err := time.LoadLocation(j.Timezone)
	if err != nil || j.Timezone == "" {
		loc = time.UTC
	}
	return t.In(loc).Format(time.RFC3339)
}

func jobsDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJobTable(w io.Writer, jobs []agent.Job) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCHEDULE\tSTATE\tNEXT\tLAST RUN\tLAST STATUS")
	for i := range jobs {
		j := &jobs[i]
		state := jobState(j)
		if state == "paused" && j.PausedReason != "" {
			state += " (" + j.PausedReason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafeArgs([]any{j.ID, jobsDash(j.Name), j.Schedule, state,
			jobTime(j, j.NextRunAt), jobTime(j, j.LastRunAt), jobsDash(j.LastStatus)})...)
	}
	return tw.Flush()
}

func writeJobDetail(w io.Writer, rt *agent.Runtime, j *agent.Job) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, termSafe(v)) }
	row("id", j.ID)
	row("name", jobsDash(j.Name))
	row("schedule", j.Schedule+" ("+j.Kind+")")
	if s, err := rt.Schedule(j); err == nil {
		row("understood as", s.Describe())
	}
	row("timezone", jobsDash(j.Timezone))
	state := jobState(j)
	if j.PausedReason != "" {
		state += ": " + j.PausedReason
	}
	row("state", state)
	repeat := "unbounded"
	if j.Repeat.Times > 0 {
		repeat = fmt.Sprintf("%d of %d", j.Repeat.Completed, j.Repeat.Times)
	}
	row("repeat", repeat)
	row("payload", describePayload(j))
	timeout := "none"
	if j.Timeout > 0 {
		timeout = j.Timeout.Std().String()
	}
	row("timeout", timeout)
	row("policies", fmt.Sprintf("misfire %s, overlap %s, window %s, on interrupt %s", j.Misfire, j.Overlap, j.Window, j.OnInterrupt))
	if j.OnInterrupt == agent.InterruptRetry {
		row("retry", fmt.Sprintf("%d attempts, backoff %s up to %s", j.Retry.MaxAttempts, j.Retry.Backoff.Std(), j.Retry.MaxBackoff.Std()))
	}
	row("next run", jobTime(j, j.NextRunAt))
	row("last run", jobTime(j, j.LastRunAt))
	row("last status", jobsDash(j.LastStatus))
	if j.LastError != "" {
		row("last error", j.LastError)
	}
	row("failure streak", jobsCount(j.FailureStreak))
	row("created", jobTime(j, &j.CreatedAt))
	for _, c := range j.Claims {
		row("running", fmt.Sprintf("run %s slot %s owner %s token %d lease until %s", c.RunID, c.Slot.Format(time.RFC3339), c.Owner, c.Token, c.LeaseUntil.Format(time.RFC3339)))
	}
	for _, p := range j.Pending {
		row("pending", fmt.Sprintf("run %s slot %s (%s) %s", p.RunID, p.Slot.Format(time.RFC3339), p.Cause, p.Reason))
	}
	return tw.Flush()
}

func describePayload(j *agent.Job) string {
	p := j.Payload
	switch {
	case p.Shell != nil && p.Shell.Command != "":
		return "shell: sh -c " + jobsQuote(p.Shell.Command)
	case p.Shell != nil:
		parts := make([]string, len(p.Shell.Argv))
		for i, a := range p.Shell.Argv {
			parts[i] = jobsQuote(a)
		}
		return "shell: " + strings.Join(parts, " ")
	case p.HTTP != nil:
		m := p.HTTP.Method
		if m == "" {
			m = "GET"
			if p.HTTP.Body != "" {
				m = "POST"
			}
		}
		return "http: " + m + " " + p.HTTP.URL
	}
	return p.Kind
}

func jobsQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`;&|<>*?()[]{}") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
