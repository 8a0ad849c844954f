package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/sidecar"
)

type agentServeOptions struct {
	config   string
	home     string
	listen   string
	idleExit time.Duration
	logLevel string
	drain    time.Duration
}

func newAgentServeCmd() *cobra.Command {
	var o agentServeOptions
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the agent: the fire endpoint, reconcile with NAS or the built-in timer",
		Long: `Run the agent on its home directory.

With cron.provider: chronos (and every cron.chronos setting valid) the agent
keeps one armed one-shot per job at NAS and answers NAS's fires on
POST /api/cron/fire; otherwise it says why and fires jobs with the built-in
timer. A listening socket passed by systemd socket activation (LISTEN_FDS) is
used instead of the listen address, and --idle-exit lets the process stop when
nothing is left to do, so systemd starts it again on the next fire.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgentServe(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	configFlag(c, &o.config)
	c.Flags().StringVar(&o.home, "home", "", "the agent's home directory (overrides the config's home and $CHRONOS_HOME)")
	c.Flags().StringVar(&o.listen, "listen", "", "address of the fire endpoint and health routes (overrides the config's listen)")
	c.Flags().DurationVar(&o.idleExit, "idle-exit", 0, "exit (status 0) after this long with no request, no run in flight and NAS in sync; under the built-in timer also nothing due within it (0: never)")
	c.Flags().StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	c.Flags().DurationVar(&o.drain, "drain-timeout", 30*time.Second, "how long runs in progress may finish at shutdown before they are stopped and recorded interrupted")
	return c
}

func runAgentServe(ctx context.Context, o agentServeOptions, stderr io.Writer) error {
	if o.idleExit < 0 {
		return usagef("agent: --idle-exit must not be negative")
	}
	cfg, decision, err := loadAgentConfig(o.config, os.LookupEnv)
	if err != nil {
		return err
	}
	if o.home != "" {
		cfg.Home = o.home
	}
	if o.listen != "" {
		cfg.Listen = o.listen
	}
	log, err := jsonLogger(stderr, "agent: --log-level", o.logLevel)
	if err != nil {
		return err
	}
	configPath := o.config
	if configPath == "" {
		configPath = os.Getenv(envAgentConfig)
	}
	return sidecar.Run(ctx, sidecar.Options{Config: cfg, Decision: decision, Logger: log, IdleExit: o.idleExit,
		DrainTimeout: o.drain, ConfigPath: configPath})
}
