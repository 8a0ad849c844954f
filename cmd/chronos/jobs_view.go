package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/localapi"
)

// jobJSON is a job as the CLI prints it in JSON.
type jobJSON = agent.JobView

func jobsJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

func jobsDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJobTable(w io.Writer, jobs []agent.Job) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCHEDULE\tSTATE\tNEXT\tLAST RUN\tLAST STATUS\tNOTIFY")
	for i := range jobs {
		j := &jobs[i]
		state := agent.JobState(j)
		if state == "paused" && j.PausedReason != "" {
			state += " (" + j.PausedReason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafeArgs([]any{j.ID, jobsDash(j.Name), j.Schedule, state,
			agent.JobTime(j, j.NextRunAt), agent.JobTime(j, j.LastRunAt), jobsDash(j.LastStatus), j.Policy.Kinds()})...)
	}
	return tw.Flush()
}

func writeJobDetail(w io.Writer, v *agent.JobView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range append(v.Details(), v.Policy.Describe(v.NotifyStreak)...) {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], termSafe(r[1]))
	}
	return tw.Flush()
}

func (c *jobsCLI) listCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "list", Short: "List jobs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, _, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			jobs, err := rt.Jobs(cmd.Context())
			views := make([]jobJSON, 0, len(jobs))
			for i := range jobs {
				views = append(views, rt.View(&jobs[i]))
			}
			switch {
			case err != nil:
				return err
			case asJSON:
				return jobsJSON(cmd.OutOrStdout(), views)
			}
			return writeJobTable(cmd.OutOrStdout(), jobs)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (c *jobsCLI) showCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "show ID", Short: "Show one job", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, _, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			j, err := rt.Job(cmd.Context(), args[0])
			if err != nil {
				return jobError(err)
			}
			if v := rt.View(&j); !asJSON {
				return writeJobDetail(cmd.OutOrStdout(), &v)
			}
			return jobsJSON(cmd.OutOrStdout(), rt.View(&j))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// changeCmd is a command that changes one job (through a running agent) and arms it.
func (c *jobsCLI) changeCmd(use, short string, do func(cmd *cobra.Command, rt localapi.JobChanger, id string) (*agent.Job, string, error)) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, rt, t, err := c.reach(cmd.Context())
			if err != nil {
				return err
			}
			if cl != nil {
				_, line, err := do(cmd, cl, args[0])
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n", termSafe(line), termSafe(cl.Made(t.Home)))
				}
				return jobError(err)
			}
			defer closeRuntime(rt)
			j, line, err := do(cmd, rt, args[0])
			if err != nil {
				return jobError(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), termSafe(line))
			return c.changed(cmd.Context(), cmd.OutOrStdout(), t, rt, j)
		},
	}
}

func (c *jobsCLI) pauseCmd() *cobra.Command {
	var reason string
	cmd := c.changeCmd("pause ID", "Pause a job: no fires until resumed (the slots that pass are recorded skipped)",
		func(cmd *cobra.Command, rt localapi.JobChanger, id string) (*agent.Job, string, error) {
			j, err := rt.Pause(cmd.Context(), id, reason)
			return &j, "paused job " + id, err
		})
	cmd.Flags().StringVar(&reason, "reason", "", "why the job is paused (shown by list and show)")
	return cmd
}

func (c *jobsCLI) resumeCmd() *cobra.Command {
	return c.changeCmd("resume ID", "Resume a paused job from its next slot after now",
		func(cmd *cobra.Command, rt localapi.JobChanger, id string) (*agent.Job, string, error) {
			j, err := rt.Resume(cmd.Context(), id)
			next := "none (finished)"
			if j.NextRunAt != nil {
				next = agent.JobTime(&j, j.NextRunAt)
			}
			return &j, fmt.Sprintf("resumed job %s; next fire %s", j.ID, next), err
		})
}

func (c *jobsCLI) rmCmd() *cobra.Command {
	return c.changeCmd("rm ID", "Remove a job (its ledger history stays)",
		func(cmd *cobra.Command, rt localapi.JobChanger, id string) (*agent.Job, string, error) {
			return nil, "removed job " + id, rt.Remove(cmd.Context(), id)
		})
}

func (c *jobsCLI) runCmd() *cobra.Command {
	var o agent.RunOptions
	var asJSON, here bool
	cmd := &cobra.Command{
		Use:   "run ID",
		Short: "Run a job now through the same claim and ledger, and wait for the outcome",
		Long: `Run a job now. The run goes through the job's claim and policies like a scheduled
fire, is recorded in the ledger with trigger "manual", and this command waits for it to
end. --force runs even if the idempotency window already has a successful run. A running
agent of the home runs it (its user, environment, directory); --here runs it in this process.
Exit status: 0 succeeded; 1 failed, interrupted or skipped (the reason is printed).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, rt, t, err := c.reach(cmd.Context())
			if here && rt == nil {
				rt, t, err = c.open(cmd.Context())
			}
			if err != nil {
				return err
			}
			var r localapi.RunWaiter = cl
			if rt != nil {
				defer closeRuntime(rt)
				r = rt
			}
			run, err := r.RunAndWait(cmd.Context(), args[0], o)
			if err != nil {
				return jobError(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := jobsJSON(out, run); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(out, termSafe(run.Summary()))
				if run.Output != "" {
					fmt.Fprintf(out, "output: %s\n", termSafe(filepath.Join(t.Home, run.Output)))
				}
			}
			if run.State != "succeeded" {
				return fmt.Errorf("jobs run: run %s %s", run.RunID, run.State)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "run even if the idempotency window already has a successful run")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	cmd.Flags().BoolVar(&here, "here", false, "run in this process even when an agent serves the home")
	return cmd
}
