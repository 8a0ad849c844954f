package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/schedule"
)

// JobView is a job as the CLI and status pages show it: the stored job plus
// its state and how its schedule is understood. The fields a reader looks
// for are always present (empty or null until they have a value), while
// jobs.json leaves them out.
type JobView struct {
	job.Job
	Name         string     `json:"name"`
	PausedReason string     `json:"paused_reason"`
	LastRunAt    *time.Time `json:"last_run_at"`
	LastStatus   string     `json:"last_status"`
	LastError    string     `json:"last_error"`
	FinishedAt   *time.Time `json:"finished_at"`
	State        string     `json:"state"`
	Describe     string     `json:"describe,omitempty"`
}

// View returns the view of j.
func (o jobOps) View(j *job.Job) JobView {
	v := JobView{Job: *j, State: JobState(j),
		Name: j.Name, PausedReason: j.PausedReason, LastRunAt: j.LastRunAt,
		LastStatus: j.LastStatus, LastError: j.LastError, FinishedAt: j.FinishedAt}
	if s, err := o.Schedule(j); err == nil {
		v.Describe = s.Describe()
	}
	return v
}

// JobState names the state of j: finished, paused, running or scheduled.
func JobState(j *job.Job) string {
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

// JobTime formats t in j's zone, the zone its schedule is read in, so a
// 09:00 Paris job shows 09:00+01:00; "-" for none.
func JobTime(j *job.Job, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	loc, err := time.LoadLocation(j.Timezone)
	if err != nil || j.Timezone == "" {
		loc = time.UTC
	}
	return t.In(loc).Format(time.RFC3339)
}

// DescribePayload says in one line what a run of p does.
func DescribePayload(p runner.Payload) string {
	switch {
	case p.Shell != nil && p.Shell.Command != "":
		return "shell: sh -c " + shellQuote(p.Shell.Command)
	case p.Shell != nil:
		parts := make([]string, len(p.Shell.Argv))
		for i, a := range p.Shell.Argv {
			parts[i] = shellQuote(a)
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

// DescribePolicies says in one line how j's policies are set.
func DescribePolicies(j *job.Job) string {
	return fmt.Sprintf("misfire %s, overlap %s, window %s, on interrupt %s", j.Misfire, j.Overlap, j.Window, j.OnInterrupt)
}

// DescribeFlex says in words what j's flexible window allows; "none" when
// it has none.
func DescribeFlex(j *job.Job) string {
	if j.Flex <= 0 {
		return "none"
	}
	return fmt.Sprintf("%s: each slot's fire may come up to %s after it", j.Flex.Std(), j.Flex.Std())
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`;&|<>*?()[]{}") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Fires returns up to n fire times of s after after, in s's zone, ending at
// the last instant RFC 3339 can write (its years have four digits).
func Fires(s *schedule.Schedule, after time.Time, n int) []time.Time {
	var out []time.Time
	for t := after; len(out) < n; {
		next, ok := s.Next(t)
		if !ok || next.UTC().Year() > 9999 || next.Year() > 9999 {
			break
		}
		out = append(out, next.In(s.Location()))
		t = next
	}
	return out
}

// Details lists what a person reads about the job, label and value, in
// order.
func (v *JobView) Details() [][2]string {
	j := &v.Job
	rows := [][2]string{{"id", j.ID}, {"name", dash(j.Name)}, {"schedule", j.Schedule + " (" + j.Kind + ")"}}
	if v.Describe != "" {
		rows = append(rows, [2]string{"understood as", v.Describe})
	}
	state := v.State
	if j.PausedReason != "" {
		state += ": " + j.PausedReason
	}
	repeat, timeout, streak := "unbounded", "none", "-"
	if j.Repeat.Times > 0 {
		repeat = fmt.Sprintf("%d of %d", j.Repeat.Completed, j.Repeat.Times)
	}
	if j.Timeout > 0 {
		timeout = j.Timeout.Std().String()
	}
	if j.FailureStreak > 0 {
		streak = fmt.Sprint(j.FailureStreak)
	}
	rows = append(rows, [][2]string{{"timezone", dash(j.Timezone)}, {"state", state}, {"repeat", repeat},
		{"payload", DescribePayload(j.Payload)}, {"timeout", timeout}, {"policies", DescribePolicies(j)}}...)
	if j.Flex > 0 {
		rows = append(rows, [2]string{"flex", DescribeFlex(j)})
	}
	rows = append(rows, KindDetails(j)...)
	if j.OnInterrupt == job.InterruptRetry {
		rows = append(rows, [2]string{"retry", fmt.Sprintf("%d attempts, backoff %s up to %s", j.Retry.MaxAttempts, j.Retry.Backoff.Std(), j.Retry.MaxBackoff.Std())})
	}
	rows = append(rows, [][2]string{{"next run", JobTime(j, j.NextRunAt)}, {"last run", JobTime(j, j.LastRunAt)}, {"last status", dash(j.LastStatus)}}...)
	if j.LastError != "" {
		rows = append(rows, [2]string{"last error", j.LastError})
	}
	rows = append(rows, [][2]string{{"failure streak", streak}, {"created", JobTime(j, &j.CreatedAt)}}...)
	for _, c := range j.Claims {
		rows = append(rows, [2]string{"running", fmt.Sprintf("run %s slot %s owner %s token %d lease until %s", c.RunID, c.Slot.Format(time.RFC3339), c.Owner, c.Token, c.LeaseUntil.Format(time.RFC3339))})
	}
	for _, p := range j.Pending {
		rows = append(rows, [2]string{"pending", fmt.Sprintf("run %s slot %s (%s) %s", p.RunID, p.Slot.Format(time.RFC3339), p.Cause, p.Reason)})
	}
	return rows
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
