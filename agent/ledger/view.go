package ledger

import (
	"fmt"
	"strings"
	"time"
)

// Summary says in one line how the run ended: its id, job and state, how
// long it ran and why.
func (r *Run) Summary() string {
	line := fmt.Sprintf("run %s of job %s %s", r.RunID, r.JobID, r.State)
	if r.State == StateSucceeded || r.State == StateFailed || r.State == StatePartial {
		line += fmt.Sprintf(" after %s", r.LastAt.Sub(r.FirstAt).Round(time.Millisecond))
	}
	if r.Reason != "" {
		line += ": " + r.Reason
	}
	return line
}

// Result says how the run's latest attempt ended: "exit N" for a shell job,
// "http N" for an http job, "-" when it did not run or got no status.
func (r *Run) Result() string {
	if r.StartedAt.IsZero() || !r.State.Terminal() || r.DurationMS == nil {
		return "-"
	}
	switch r.Runner {
	case "http":
		if r.ExitCode > 0 {
			return fmt.Sprintf("http %d", r.ExitCode)
		}
	case "shell":
		// exit_code is left out of a line when it is 0: a run that ended
		// without an error exited 0. A negative status is a process that
		// never exited on its own (killed, or not started): the reason
		// says which.
		if r.ExitCode > 0 || (r.ExitCode == 0 && r.Error == "") {
			return fmt.Sprintf("exit %d", r.ExitCode)
		}
	default:
		if r.ExitCode != 0 {
			return fmt.Sprintf("code %d", r.ExitCode)
		}
	}
	return "-"
}

// Took is how long the latest attempt ran, "-" while it runs or when it
// never ran.
func (r *Run) Took() string {
	if r.DurationMS == nil {
		return "-"
	}
	return (time.Duration(*r.DurationMS) * time.Millisecond).String()
}

// ParseSince reads an RFC 3339 time, a YYYY-MM-DD date (UTC) or a duration
// back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q is not an RFC 3339 time, a date or a duration like 24h", s)
}
