package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/notify"
)

// notifyCLI is what the notify commands share: the --home flag.
type notifyCLI struct{ home string }

func newNotifyCmd() *cobra.Command {
	c := &notifyCLI{}
	g := groupCmd("notify", "See, replay and verify the notifications of job runs", c.listCmd(), c.replayCmd(), c.secretCmd())
	g.PersistentFlags().StringVar(&c.home, "home", "", "agent home directory (default $CHRONOS_HOME, else the home of $CHRONOS_AGENT_CONFIG, else ~/.chronos)")
	return g
}

// outbox opens the outbox of the home the jobs commands would use.
func (c *notifyCLI) outbox() (*notify.FileOutbox, error) {
	t, err := target(c.home)
	if err != nil {
		return nil, err
	}
	return notify.OpenFileOutbox(notify.HomeDir(t.Home), notify.FileOptions{})
}

func (c *notifyCLI) listCmd() *cobra.Command {
	var pending, dead, asJSON bool
	cmd := &cobra.Command{Use: "list", Short: "List the notifications of the home's jobs, oldest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			box, err := c.outbox()
			if err != nil {
				return err
			}
			defer func() { _ = box.Close() }()
			var states []notify.State
			if pending {
				states = []notify.State{notify.StatePending, notify.StateSending}
			} else if dead {
				states = []notify.State{notify.StateDead}
			}
			rows, err := box.List(cmd.Context(), states...)
			if err != nil {
				return err
			} else if asJSON {
				return jobsJSON(cmd.OutOrStdout(), append([]notify.Row{}, rows...))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, strings.Join(notify.RowHeader, "\t"))
			for _, r := range rows {
				fmt.Fprintln(tw, strings.Join(r.Columns(termSafe), "\t"))
			}
			return tw.Flush()
		}}
	cmd.Flags().BoolVar(&pending, "pending", false, "only the notifications still owed (pending or being sent)")
	cmd.Flags().BoolVar(&dead, "dead", false, "only the notifications given up on (see notify replay)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.MarkFlagsMutuallyExclusive("pending", "dead")
	return cmd
}

func (c *notifyCLI) replayCmd() *cobra.Command {
	return &cobra.Command{Use: "replay ID", Short: "Owe a sent or dead notification again, under the same id", Args: cobra.ExactArgs(1),
		Long: `Make a sent or dead notification pending again, with a new give-up time, under the same id
(webhook-id), and so the same de-duplication. The home's agent sends it within 30 seconds.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			box, err := c.outbox()
			if err != nil {
				return err
			}
			defer func() { _ = box.Close() }()
			r, err := box.Replay(cmd.Context(), args[0])
			if errors.Is(err, notify.ErrNotFound) {
				return fmt.Errorf("notify replay: no notification %q in %s (see chronos notify list)", args[0], box.Path())
			} else if err != nil {
				return fmt.Errorf("notify replay: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), termSafe(r.String()))
			return nil
		}}
}

func (c *notifyCLI) secretCmd() *cobra.Command {
	return &cobra.Command{Use: "secret", Short: "Print the webhook signing secret (whsec_…) receivers verify with, creating it if absent", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := target(c.home)
			if err != nil {
				return err
			}
			s, err := notify.LoadOrCreateSecret(notify.HomeDir(t.Home))
			if err == nil {
				fmt.Fprintln(cmd.OutOrStdout(), s.String())
			}
			return err
		}}
}
