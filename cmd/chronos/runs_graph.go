package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
	"github.com/chronoscron/chronos/internal/termtext"
)

// runsRTCmd is a runs subcommand about one run, on the home's runtime; an
// unknown or finished run is a usage error.
func runsRTCmd(c *jobsCLI, use, short, long string, run func(*cobra.Command, *agent.Runtime, provider.Target, string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.ExactArgs(1),
		RunE: c.onRuntime(func(_ context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, t provider.Target) error {
			err := run(cmd, rt, t, args[0])
			if errors.Is(err, agent.ErrRunUnknown) || errors.Is(err, agent.ErrRunNotRunning) {
				return asUsage(err)
			}
			return err
		})}
}

func newRunsShowCmd(rc *jobsCLI) *cobra.Command {
	var (
		out        cmdline.Output
		showOutput bool
	)
	c := runsRTCmd(rc, "show RUN_ID", "Show a run and, for a fanout, its children (with their items) and reducer",
		"Show one run from the ledger: its state, times, output file and reason. For a fanout parent the\nchildren follow, each with its item and state, then the reducer. --output prints what the run wrote\ninstead (stdout and stderr as the job wrote them; escaped for a terminal). Exit 2 for an unknown run.",
		func(cmd *cobra.Command, rt *agent.Runtime, t provider.Target, id string) error {
			r, kids, err := rt.RunGraph(cmd.Context(), id)
			if err != nil {
				return err
			}
			if showOutput {
				if r.Output == "" {
					return fmt.Errorf("run %s kept no output", termSafe(id))
				}
				return writeRunOutput(cmd.OutOrStdout(), t.Home, r)
			}
			v := map[string]any{"run": r, "children": append([]ledger.Run{}, kids...)}
			return out.Print(cmd.OutOrStdout(), v, func(w io.Writer) error { return ledger.WriteShow(w, r, kids, t.Home) })
		})
	c.Flags().BoolVar(&showOutput, "output", false, "print the run's output instead of its details")
	c.Example = "  chronos runs show r20261128T130107-ae2a82041a\n  chronos runs show r20261128T130107-ae2a82041a --output"
	return out.Register(c, "the run and its children")
}

// writeRunOutput copies the output file of run r (under home) to w: as
// the job wrote it when w is not a terminal, escaped for the terminal
// (newlines kept) when it is.
func writeRunOutput(w io.Writer, home string, r ledger.Run) error {
	f, err := os.Open(filepath.Join(home, r.Output))
	if err != nil {
		return fmt.Errorf("output of run %s: %w", termSafe(r.RunID), err)
	}
	defer f.Close()
	if !cmdline.IsTerminal(w) {
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("output of run %s: %w", termSafe(r.RunID), err)
		}
		return nil
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("output of run %s: %w", termSafe(r.RunID), err)
	}
	_, err = io.WriteString(w, termtext.Escape(string(b), termtext.KeepNewlines))
	return err
}

func newRunsCancelCmd(rc *jobsCLI) *cobra.Command {
	var out cmdline.Output
	c := runsRTCmd(rc, "cancel RUN_ID", "Cancel a run in progress (a fanout's pending children never start, running ones are stopped)",
		"Ask the agent that owns a run to stop it: the request is written to the job store, so it reaches an\nagent in another process. A fanout starts no more children, running ones get SIGTERM and SIGKILL\n2 s later, the reducer does not run; each stopped run is recorded cancelled. Exit 2 for a run that is\nunknown or not running.",
		func(cmd *cobra.Command, rt *agent.Runtime, _ provider.Target, id string) error {
			if err := rt.CancelRun(cmd.Context(), id, ""); err != nil {
				return err
			}
			return out.Print(cmd.OutOrStdout(), map[string]string{"run_id": id, "cancel": "requested"},
				cmdline.Textf("cancel of run %s requested", termSafe(id)))
		})
	return out.Register(c, "the request")
}
