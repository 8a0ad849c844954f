package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/ledger"
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
			fmt.Fprintln(tw, "RUN\tJOB\tSLOT\tTRIGGER\tSTATE\tATTEMPT\tLATE\tREASON")
			for _, r := range runs {
				late := (time.Duration(r.LatenessMS) * time.Millisecond).String()
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", termSafeArgs([]any{r.RunID, r.JobID, r.Slot.Format(time.RFC3339),
					jobsDash(r.Trigger), r.State, r.Attempt, late, jobsDash(runsOneLine(r.Reason))})...)
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
