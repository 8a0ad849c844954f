package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

func newRunsCmd() *cobra.Command {
	c := &jobsCLI{}
	g := homeGroup(&c.home, groupCmd("runs", "Read the run ledger, show a fanout's children, cancel a run", newRunsListCmd(c), newRunsShowCmd(c), newRunsCancelCmd(c)))
	addCompletions(g, c)
	return g
}

func newRunsListCmd(rc *jobsCLI) *cobra.Command {
	var (
		jobID, since string
		limit        int
		out          cmdline.Output
		tree         bool
		showOutput   bool
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
				t, err := ledger.ParseSince(since, time.Now())
				if err != nil {
					return usagef("runs list: %v", err)
				}
				f.Since = t
			}
			t, err := target(rc.home)
			if err != nil {
				return err
			}
			runs, err := agent.ReadRuns(cmd.Context(), agent.Config{Home: t.Home, Location: t.Location, MaxJobsFile: t.Config.JobsFileLimit()}, f)
			if err != nil {
				return err
			}
			if tree {
				return ledger.WriteTree(cmd.OutOrStdout(), runs)
			}
			if showOutput {
				return writeRunOutputs(cmd.OutOrStdout(), t.Home, runs)
			}
			return out.Print(cmd.OutOrStdout(), runs, func(w io.Writer) error { return ledger.WriteRunTable(w, runs, t.Home) })
		},
	}
	c.Flags().StringVar(&jobID, "job", "", "only runs of this job")
	c.Flags().StringVar(&since, "since", "", "only runs from this time on: RFC 3339, a date (2026-06-01) or a duration back from now (24h)")
	c.Flags().IntVar(&limit, "limit", 100, "keep the newest N runs (0: all)")
	out.Register(c, "the runs")
	c.Flags().BoolVar(&tree, "tree", false, "nest each fanout's children (with their items) and reducer under its parent")
	c.Flags().BoolVar(&showOutput, "output", false, "print each listed run's output under a ==> RUN JOB STATE <== line, instead of the table")
	c.MarkFlagsMutuallyExclusive("tree", "output", "json")
	return c
}

// writeRunOutputs prints the output of each run that kept one, under a
// line naming the run, its job and its state (as tail does for files).
func writeRunOutputs(w io.Writer, home string, runs []ledger.Run) error {
	for _, r := range runs {
		if r.Output == "" {
			continue
		}
		if _, err := fmt.Fprintf(w, "==> %s %s %s <==\n", termSafe(r.RunID), termSafe(r.JobID), r.State); err != nil {
			return err
		}
		if err := writeRunOutput(w, home, r); err != nil {
			return err
		}
	}
	return nil
}
