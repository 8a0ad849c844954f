package main

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/sidecar"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

type agentStatusOptions struct {
	config string
	home   string
	out    cmdline.Output
	fires  int
}

func newAgentStatusCmd() *cobra.Command {
	var o agentStatusOptions
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the provider in use and why, desired vs armed, last fires and errors, JWKS health",
		Long: `Show the agent's state: which provider is in use and why; under the chronos
provider the desired fires against what NAS holds (asked live), the last
reconcile, its counters and recent errors, and the health of NAS's key set (as
the serving agent last saw it and fetched now); whether the home (jobs.json,
the ledger) can be written; and the last fires from the run ledger with their
outcomes. It is a read: it changes nothing at NAS nor in the home. Fires NAS
reports as failed are shown as pending; the serving agent records them missed
and acknowledges them at its next reconcile.`,
		Example: "  chronos agent status --config /etc/chronos/agent.yaml\n  chronos agent status --home ~/.chronos --json | jq .provider",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgentStatus(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	configFlag(c, &o.config)
	o.out.Register(c, "the report")
	c.Flags().StringVar(&o.home, "home", "", "the agent's home directory (overrides the config's home and $CHRONOS_HOME)")
	c.Flags().IntVar(&o.fires, "fires", 10, "how many recent fires to show")
	return c
}

func runAgentStatus(ctx context.Context, o agentStatusOptions, out io.Writer) error {
	cfg, decision, err := loadAgentConfig(o.config, os.LookupEnv)
	if err != nil {
		return err
	}
	if o.home != "" {
		cfg.Home = o.home
	}
	if o.fires < 0 {
		return usagef("agent status: --fires must not be negative")
	}
	st, err := sidecar.Status(ctx, sidecar.StatusOptions{Config: cfg, Decision: decision, Fires: o.fires})
	if err != nil {
		return err
	}
	return o.out.Print(out, st, st.WriteText)
}
