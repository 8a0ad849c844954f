package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/demo"
)

func newDemoCmd() *cobra.Command {
	var (
		o   demo.Options
		dur time.Duration
	)
	c := &cobra.Command{
		Use:   "demo [--for DURATION] [--home DIR]",
		Short: "Run NAS, its relay and an agent in one process with sample jobs",
		Long: `Run the whole of Chronos in one process, with no Redis and no config: NAS on the
embedded relay engine with a dispatcher, and an agent with a temporary home,
all on 127.0.0.1 ephemeral ports, with signing keys made in memory. A few
sample jobs are added (an interval, a one-shot, a zoned cron line with
seconds, and a failing job whose alert goes to a file in the home) and every
step of every fire is logged as it happens:

  armed → relayed → token verified → claimed → ran → re-armed (→ notified)

Ctrl-C (or the end of --for) stops it and prints a summary from the agent's
run ledger: fires per job, lateness, duplicates and failures.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dur < 0 {
				return usagef("demo: --for %s must not be negative", dur)
			}
			ctx := cmd.Context()
			if dur > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, dur)
				defer cancel()
			}
			return demo.Run(ctx, o, cmd.OutOrStdout())
		},
	}
	c.Flags().DurationVar(&dur, "for", 0, "stop by itself after this long (0: until Ctrl-C)")
	c.Flags().StringVar(&o.Home, "home", "", "the agent's home directory, kept after the demo (default: a temporary one, removed)")
	return c
}
