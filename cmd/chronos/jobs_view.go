package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

// jobRemoved is what jobs rm --json prints.
type jobRemoved struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

func (c *jobsCLI) listCmd() *cobra.Command {
	var out cmdline.Output
	return out.Register(&cobra.Command{
		Use: "list", Short: "List jobs", Args: cobra.NoArgs,
		Example: "  chronos jobs list\n  chronos jobs list --json | jq -r '.[] | select(.state==\"paused\") | .id'",
		RunE: c.onRuntime(func(ctx context.Context, cmd *cobra.Command, _ []string, rt *agent.Runtime, _ provider.Target) error {
			jobs, err := rt.Jobs(ctx)
			if err != nil {
				return err
			}
			views := make([]agent.JobView, 0, len(jobs))
			for i := range jobs {
				views = append(views, rt.View(&jobs[i]))
			}
			return out.Print(cmd.OutOrStdout(), views, func(w io.Writer) error { return agent.WriteJobTable(w, jobs) })
		}),
	}, "the jobs")
}

func (c *jobsCLI) showCmd() *cobra.Command {
	var out cmdline.Output
	return out.Register(&cobra.Command{
		Use: "show ID", Short: "Show one job", Args: cobra.ExactArgs(1),
		Example: "  chronos jobs show backup\n  chronos jobs show backup --json | jq .next_run_at",
		RunE: c.onRuntime(func(ctx context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, _ provider.Target) error {
			j, err := rt.Job(ctx, args[0])
			if err != nil {
				return jobError(err)
			}
			v := rt.View(&j)
			return out.Print(cmd.OutOrStdout(), v, v.WriteDetail)
		}),
	}, "the job")
}

// changeCmd is a command that changes one job (through a running agent) and
// arms the change; do returns the changed job (nil when removed) and the
// line that says so.
func (c *jobsCLI) changeCmd(use, short string, do func(cmd *cobra.Command, rt localapi.JobChanger, id string) (*job.Job, string, error)) *cobra.Command {
	var out cmdline.Output
	return out.Register(&cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(1),
		Example: "  chronos jobs " + strings.TrimSuffix(use, " ID") + " backup\n  chronos jobs " + strings.TrimSuffix(use, " ID") + " backup --json",
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
			var v any = jobRemoved{ID: args[0], Removed: true}
			if j != nil {
				v = rt.View(j)
			}
			if err := out.Print(cmd.OutOrStdout(), v, cmdline.Textf("%s", termSafe(line))); err != nil {
				return err
			}
			return c.changed(cmd.Context(), out.Aside(cmd), t, rt, j)
		},
	}, "the job")
}

func (c *jobsCLI) pauseCmd() *cobra.Command {
	var reason string
	cmd := c.changeCmd("pause ID", "Pause a job: no fires until resumed (the slots that pass are recorded skipped)",
		func(cmd *cobra.Command, rt localapi.JobChanger, id string) (*job.Job, string, error) {
			j, err := rt.Pause(cmd.Context(), id, reason)
			return &j, "paused job " + id, err
		})
	cmd.Flags().StringVar(&reason, "reason", "", "why the job is paused (shown by list and show)")
	return cmd
}

func (c *jobsCLI) resumeCmd() *cobra.Command {
	return c.changeCmd("resume ID", "Resume a paused job from its next slot after now",
		func(cmd *cobra.Command, rt localapi.JobChanger, id string) (*job.Job, string, error) {
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
		func(cmd *cobra.Command, rt localapi.JobChanger, id string) (*job.Job, string, error) {
			return nil, "removed job " + id, rt.Remove(cmd.Context(), id)
		})
}

func (c *jobsCLI) runCmd() *cobra.Command {
	var o agent.RunOptions
	var out cmdline.Output
	var here bool
	cmd := &cobra.Command{
		Use:   "run ID",
		Short: "Run a job now through the same claim and ledger, and wait for the outcome",
		Long: `Run a job now. The run goes through the job's claim and policies like a scheduled
fire, is recorded in the ledger with trigger "manual", and this command waits for it to
end. --force runs even if the idempotency window already has a successful run. A running
agent of the home runs it (its user, environment, directory); --here runs it in this process.
A chain step whose chain is gone, closed or expired does not run (recorded skipped).
Exit status: 0 succeeded; 1 failed, interrupted or skipped (the reason is printed);
6 a chain step whose chain is closed or expired.`,
		Example: "  chronos jobs run backup\n  chronos jobs run backup --force --json | jq .state",
		Args:    cobra.ExactArgs(1),
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
			if code := chain.ExitCode(err); code != 0 {
				return cmdline.WithCode(code, err)
			}
			if err != nil {
				return jobError(err)
			}
			err = out.Print(cmd.OutOrStdout(), run, func(w io.Writer) error { return ledger.WriteOutcome(w, &run, t.Home) })
			if err == nil && !run.State.Succeeded() {
				err = fmt.Errorf("jobs run: run %s %s", run.RunID, run.State)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "run even if the idempotency window already has a successful run")
	out.Register(cmd, "the run")
	cmd.Flags().BoolVar(&here, "here", false, "run in this process even when an agent serves the home")
	return cmd
}
