package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/internal/cmdline"
)

// runsRTCmd is a runs subcommand about one run, on the home's runtime; an
// unknown or finished run is a usage error.
func runsRTCmd(c *jobsCLI, use, short, long string, run func(*cobra.Command, *agent.Runtime, string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.ExactArgs(1),
		RunE: c.onRuntime(func(_ context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, _ provider.Target) error {
			err := run(cmd, rt, args[0])
			if errors.Is(err, agent.ErrRunUnknown) || errors.Is(err, agent.ErrRunNotRunning) {
				return asUsage(err)
			}
			return err
		})}
}

func newRunsShowCmd(rc *jobsCLI) *cobra.Command {
	var out cmdline.Output
	c := runsRTCmd(rc, "show RUN_ID", "Show a run and, for a fanout, its children (with their items) and reducer",
		"Show one run from the ledger: its state, times, output and reason. For a fanout parent the children\nfollow, each with its item and state, then the reducer. Exit 2 for an unknown run.",
		func(cmd *cobra.Command, rt *agent.Runtime, id string) error {
			r, kids, err := rt.RunGraph(cmd.Context(), id)
			if err != nil {
				return err
			}
			v := map[string]any{"run": r, "children": append([]ledger.Run{}, kids...)}
			return out.Print(cmd.OutOrStdout(), v, func(w io.Writer) error { return ledger.WriteShow(w, r, kids) })
		})
	return out.Register(c, "the run and its children")
}

func newRunsCancelCmd(rc *jobsCLI) *cobra.Command {
	var out cmdline.Output
	c := runsRTCmd(rc, "cancel RUN_ID", "Cancel a run in progress (a fanout's pending children never start, running ones are stopped)",
		"Ask the agent that owns a run to stop it: the request is written to the job store, so it reaches an\nagent in another process. A fanout starts no more children, running ones get SIGTERM and SIGKILL\n2 s later, the reducer does not run; each stopped run is recorded cancelled. Exit 2 for a run that is\nunknown or not running.",
		func(cmd *cobra.Command, rt *agent.Runtime, id string) error {
			if err := rt.CancelRun(cmd.Context(), id, ""); err != nil {
				return err
			}
			return out.Print(cmd.OutOrStdout(), map[string]string{"run_id": id, "cancel": "requested"},
				cmdline.Textf("cancel of run %s requested", termSafe(id)))
		})
	return out.Register(c, "the request")
}
