package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/runner"
)

func newRunsCmd() *cobra.Command {
	var home string
	c := groupCmd("runs", "Read the run ledger", newRunsListCmd(&home))
	c.PersistentFlags().StringVar(&home, "home", "", "agent home directory (default $CHRONOS_HOME, else the home of $CHRONOS_AGENT_CONFIG, else ~/.chronos)")
	return c
}

func newRunsListCmd(home *string) *cobra.Command {
	var (
		jobID, since string
		limit        int
		asJSON       bool
	)
	c := &cobra.Command{
		Use:   "list",
		Short: "List runs, oldest first, one line per run (its lines in the ledger folded)",
		Long: `List runs, oldest first, one line per run (its lines in the ledger folded).

The table shows for each run: whether it was forced (jobs run --force),
its result (the exit status of a shell job as "exit N", the HTTP status of
an http job as "http N", "-" when the run never ran or got no answer), how
long its latest attempt ran, and the file holding its output. --json prints
every field of the ledger's fold, these included.`,
		Example: `  chronos runs list --job backup --since 24h
  chronos runs list --since 2026-06-01 --limit 200 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usagef("runs list: --limit %d must not be negative", limit)
			}
			f := ledger.Filter{JobID: jobID, Limit: limit}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return asUsage(err)
				}
				f.Since = t
			}
			hd, err := resolveHome(*home)
			if err != nil {
				return err
			}
			lg, err := ledger.Open(filepath.Join(hd, "runs"))
			if err != nil {
				return err
			}
			runs, err := lg.Runs(cmd.Context(), f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if runs == nil {
					runs = []ledger.Run{}
				}
				return jobsJSON(out, runs)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tJOB\tSLOT\tTRIGGER\tSTATE\tATTEMPT\tFORCED\tLATE\tRESULT\tDURATION\tOUTPUT\tREASON")
			for i := range runs {
				r := &runs[i]
				late := (time.Duration(r.LatenessMS) * time.Millisecond).String()
				forced := "-"
				if r.Forced {
					forced = "yes"
				}
				output := ""
				if r.Output != "" {
					output = filepath.Join(hd, r.Output)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafeArgs([]any{r.RunID, r.JobID, r.Slot.Format(time.RFC3339),
					jobsDash(r.Trigger), r.State, r.Attempt, forced, late, runsResult(r), runsDuration(r), jobsDash(output),
					jobsDash(runsOneLine(r.Reason))})...)
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&jobID, "job", "", "only runs of this job")
	c.Flags().StringVar(&since, "since", "", "only runs from this time on: RFC 3339, a date (2026-06-01) or a duration back from now (24h)")
	c.Flags().IntVar(&limit, "limit", 100, "keep the newest N runs (0: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// parseSince reads an RFC 3339 time, a YYYY-MM-DD date (UTC) or a duration
// back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
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
	return time.Time{}, fmt.Errorf("runs list: --since %q is not an RFC 3339 time, a date or a duration like 24h", s)
}

// runsOneLine folds a reason onto one line of at most 120 bytes.
func runsOneLine(s string) string {
	return cutText(strings.ReplaceAll(s, "\n", " "), 120)
}

// runsResult says how a run's latest attempt ended: "exit N" for a shell
// job, "http N" for an http job, "-" when it did not run or got no status.
func runsResult(r *ledger.Run) string {
	if r.StartedAt.IsZero() || !r.State.Terminal() || r.DurationMS == nil {
		return "-"
	}
	switch r.Runner {
	case runner.KindHTTP:
		if r.ExitCode > 0 {
			return fmt.Sprintf("http %d", r.ExitCode)
		}
	case runner.KindShell:
		// exit_code is left out of a line when it is 0: a run that ended
		// without an error exited 0.
		// A negative status is a process that never exited on its own
		// (killed, or not started): the reason says which.
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

// runsDuration is how long the latest attempt ran, "-" while it runs or
// when it never ran.
func runsDuration(r *ledger.Run) string {
	if r.DurationMS == nil {
		return "-"
	}
	return (time.Duration(*r.DurationMS) * time.Millisecond).String()
}
