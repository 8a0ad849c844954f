package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

// notifyCLI is what the notify commands share: the --home flag.
type notifyCLI struct{ home string }

func newNotifyCmd() *cobra.Command {
	c := &notifyCLI{}
	return homeGroup(&c.home, groupCmd("notify", "See, replay and verify the notifications of job runs", c.listCmd(), c.replayCmd(), c.secretCmd()))
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
	var pending, dead bool
	var out cmdline.Output
	cmd := &cobra.Command{Use: "list", Short: "List the notifications of the home's jobs, oldest first", Args: cobra.NoArgs,
		Example: "  chronos notify list --dead\n  chronos notify list --pending --json | jq length",
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
			}
			return out.Print(cmd.OutOrStdout(), append([]notify.Row{}, rows...), func(w io.Writer) error { return notify.WriteRows(w, rows) })
		}}
	cmd.Flags().BoolVar(&pending, "pending", false, "only the notifications still owed (pending or being sent)")
	cmd.Flags().BoolVar(&dead, "dead", false, "only the notifications given up on (see notify replay)")
	out.Register(cmd, "the notifications")
	cmd.MarkFlagsMutuallyExclusive("pending", "dead")
	return cmd
}

func (c *notifyCLI) replayCmd() *cobra.Command {
	var out cmdline.Output
	return out.Register(&cobra.Command{Use: "replay ID", Short: "Owe a sent or dead notification again, under the same id", Args: cobra.ExactArgs(1),
		Long: `Make a sent or dead notification pending again, with a new give-up time, under the same id
(webhook-id), and so the same de-duplication. The home's agent sends it within 30 seconds.`,
		Example: "  chronos notify replay 01J2Z3...\n  chronos notify list --dead --json | jq -r '.[].id' | xargs -n1 chronos notify replay",
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
			return out.Print(cmd.OutOrStdout(), r, cmdline.Textf("%s", termSafe(r.String())))
		}}, "the notification")
}

func (c *notifyCLI) secretCmd() *cobra.Command {
	var out cmdline.Output
	return out.Register(&cobra.Command{Use: "secret", Short: "Print the webhook signing secret (whsec_…) receivers verify with, creating it if absent", Args: cobra.NoArgs,
		Long: `Print the secret the home's agent signs webhook notifications with (Standard Webhooks:
webhook-id, webhook-timestamp, webhook-signature), creating it if absent. Give it to
the receivers; keep it out of logs.`,
		Example: "  chronos notify secret --home /var/lib/chronos\n  chronos notify secret --json | jq -r .secret",
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := target(c.home)
			if err != nil {
				return err
			}
			s, err := notify.LoadOrCreateSecret(notify.HomeDir(t.Home))
			if err != nil {
				return err
			}
			return out.Print(cmd.OutOrStdout(), struct {
				Secret string `json:"secret"`
			}{s.String()}, cmdline.Textf("%s", s.String()))
		}}, "the secret")
}
