package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
)

func newRelayCmd() *cobra.Command {
	var (
		configPath  string
		listen      string
		dispatchers int
		lease       time.Duration
	)
	c := &cobra.Command{
		Use:   "relay",
		Short: "Run relay dispatchers only",
		Long: `Run relay dispatchers only: they claim due one-shots from the shared store
and POST each, signed, to the relay route of NAS.

It reads the same config file (and CHRONOS_NAS_* variables) as chronos nas and
uses its store (a redis:// URL: the memory store lives inside one process),
relay.secrets, relay.nas_url and relay.dispatchers. With --listen it serves
/healthz, /readyz and /metrics there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadNASConfig(configPath, os.LookupEnv)
			if err != nil {
				return asUsage(err)
			}
			if cfg.Store == "memory" {
				return usagef("relay: store is memory; chronos relay needs the shared redis:// store of the NAS processes")
			}
			if cmd.Flags().Changed("dispatchers") {
				cfg.Relay.Dispatchers = &dispatchers
			}
			if *cfg.Relay.Dispatchers < 1 {
				return usagef("relay: relay.dispatchers is %d; a relay process needs at least 1", *cfg.Relay.Dispatchers)
			}
			if lease != 0 && lease < 100*time.Millisecond {
				return usagef("relay: --lease %s is shorter than 100ms", lease)
			}
			return runRelay(cmd.Context(), cfg, relayRunOptions{listen: listen, lease: lease}, cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&configPath, "config", "", "YAML config file, the one chronos nas reads (keys may also come from CHRONOS_NAS_* variables)")
	c.Flags().StringVar(&listen, "listen", "", "address for /healthz, /readyz and /metrics (empty: none)")
	c.Flags().IntVar(&dispatchers, "dispatchers", 0, "dispatchers to run (overrides relay.dispatchers)")
	c.Flags().DurationVar(&lease, "lease", 0, "lease per claim: how soon the fires of a crashed relay are retried (default 30s)")
	return c
}

// relayRunOptions are the command-line settings of `chronos relay`.
type relayRunOptions struct {
	listen string        // health and metrics address; "" for none
	lease  time.Duration // lease per claim; 0 for the dispatcher's default
}

// runRelay runs the dispatchers until ctx ends, then drains them.
func runRelay(ctx context.Context, cfg nas.Config, o relayRunOptions, stderr io.Writer) error {
	log, err := newNASLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	return node.RunRelay(ctx, node.RelayOptions{Config: cfg, Logger: log, Listen: o.listen, Lease: o.lease})
}
