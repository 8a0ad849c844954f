package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/ledger"
)

// runsRTCmd is a runs subcommand about one run, on the home's runtime; an
// unknown or finished run is a usage error.
func runsRTCmd(home *string, use, short string, run func(*cobra.Command, *agent.Runtime, string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		rt, _, err := (&jobsCLI{home: *home}).open(cmd.Context())
		if err != nil {
			return err
		}
		defer closeRuntime(rt)
		if err = run(cmd, rt, args[0]); errors.Is(err, agent.ErrRunUnknown) || errors.Is(err, agent.ErrRunNotRunning) {
			return asUsage(err)
		}
		return err
	}}
}

func newRunsShowCmd(home *string) *cobra.Command {
	var asJSON bool
	c := runsRTCmd(home, "show RUN_ID", "Show a run and, for a fanout, its children (with their items) and reducer",
		func(cmd *cobra.Command, rt *agent.Runtime, id string) error {
			r, kids, err := rt.RunGraph(cmd.Context(), id)
			if err != nil {
				return err
			} else if asJSON {
				return jobsJSON(cmd.OutOrStdout(), map[string]any{"run": r, "children": append([]ledger.Run{}, kids...)})
			}
			return ledger.WriteShow(cmd.OutOrStdout(), r, kids)
		})
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: the run and its children")
	return c
}

func newRunsCancelCmd(home *string) *cobra.Command {
	return runsRTCmd(home, "cancel RUN_ID", "Cancel a run in progress (a fanout's pending children never start, running ones are stopped)",
		func(cmd *cobra.Command, rt *agent.Runtime, id string) error {
			err := rt.CancelRun(cmd.Context(), id)
			if err == nil {
				cmd.Printf("cancel of run %s requested\n", termSafe(id))
			}
			return err
		})
}
