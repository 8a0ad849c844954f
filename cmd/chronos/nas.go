package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/logging"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
)

func newNASCmd() *cobra.Command {
	var configPath string
	var printConfig bool
	c := &cobra.Command{
		Use:   "nas",
		Short: "Run the NAS service (API and, unless disabled, dispatchers)",
		Long: `Run the NAS service: the agent API, JWKS and health on listen; the relay
route, operator routes and metrics on relay_listen (or on listen when it is
empty); and relay.dispatchers dispatchers on the same store.

Fire tokens are signed with ES256 unless signing_alg says otherwise (many
agents' verifiers accept only RS and ES algorithms); with signing_keys_dir and
no signing_alg, the dir's signing key decides, so a dir of EdDSA keys keeps
signing as before. NAS refuses an operator_token shorter than 16 bytes and a
keys dir or key file that group or others may write.

Every config key can also be set in the environment as CHRONOS_NAS_<KEY>
(dots become underscores; lists are comma separated); a CHRONOS_NAS_ variable
that names no key is an error. A relative path in the config file is relative
to the file. --config defaults to CHRONOS_NAS_CONFIG. --print-config prints
the effective configuration with each key's variable, secrets redacted.

On a PostgreSQL store NAS starts only on a schema at its binary's version:
run chronos nas migrate first, or set store_migrate: true to migrate at
start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadNASConfig(configPath)
			if err != nil {
				return err
			}
			if printConfig {
				out, err := cfg.EffectiveYAML()
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			return runNAS(cmd.Context(), cfg, cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&configPath, "config", "", "YAML config file (env CHRONOS_NAS_CONFIG; keys may also come from CHRONOS_NAS_* variables)")
	c.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration and exit")
	c.AddCommand(newNASUnarmedCmd(), newNASMigrateCmd())
	return c
}

// loadNASConfig reads NAS's configuration as chronos nas does: the file at
// configPath (default CHRONOS_NAS_CONFIG) and the CHRONOS_NAS_ variables,
// a variable that names no key refused. Every failure is a usage error.
func loadNASConfig(configPath string) (nas.Config, error) {
	if err := nas.CheckEnv(os.Environ()); err != nil {
		return nas.Config{}, asUsage(err)
	}
	if configPath == "" {
		configPath = os.Getenv(nas.EnvConfigFile)
	}
	cfg, err := nas.LoadConfig(configPath, os.LookupEnv)
	if err != nil {
		return nas.Config{}, asUsage(err)
	}
	return cfg, nil
}

// jsonLogger returns a JSON logger on w at level (debug, info, warn, error;
// see logging.NewJSON); a bad level is a usage error naming key, the setting
// it came from.
func jsonLogger(w io.Writer, key, level string) (*slog.Logger, error) {
	l, err := parseLogLevel(key, level)
	if err != nil {
		return nil, err
	}
	return logging.NewJSON(w, l), nil
}

// parseLogLevel reads a log level (see logging.ParseLevel); a bad one is a
// usage error naming key, the setting it came from.
func parseLogLevel(key, level string) (slog.Level, error) {
	l, err := logging.ParseLevel(level)
	if err != nil {
		return 0, usagef("%s: %w", key, err)
	}
	return l, nil
}

// runNAS runs NAS until ctx ends (SIGTERM/interrupt), then shuts down.
func runNAS(ctx context.Context, cfg nas.Config, stderr io.Writer) error {
	log, err := jsonLogger(stderr, "log_level", cfg.LogLevel)
	if err != nil {
		return err
	}
	n, err := node.New(ctx, node.Options{Config: cfg, Logger: log})
	if err != nil {
		return err
	}
	return n.Run(ctx)
}

func newRelayCmd() *cobra.Command {
	var o node.RelayOptions
	var configPath string
	var dispatchers int
	c := &cobra.Command{
		Use:   "relay",
		Short: "Run relay dispatchers only",
		Long: `Run relay dispatchers only: they claim due one-shots from the shared store
and POST each, signed, to the relay route of NAS.

It reads the same config file (and CHRONOS_NAS_* variables) as chronos nas and
uses its store (a redis:// or postgres:// URL: the memory store lives inside
one process; a PostgreSQL schema is migrated by chronos nas migrate, or at
start with store_migrate),
relay.secrets, relay.nas_url, relay.dispatchers, relay.retry,
relay.per_agent (parallelism, rate) and relay.misfire_grace. With --listen it serves
/healthz, /readyz and /metrics there.

A fire armed for direct delivery (an agent with delivery: direct) does not go
to NAS: the relay signs it under the job's cron key, which it opens with
relay.cron_key_encryption_key_file (or --cron-key-encryption-key-file; NAS's
own key, mode 0600), and POSTs it to the agent itself, with public_url as the
token's iss and NAS's callback policy (allow_private_callbacks,
callback_allowlist) and delivery_timeout. Without the key such fires are
retried, for a dispatcher that has it, and logged once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if o.Config, err = nas.LoadConfig(configPath, os.LookupEnv); err != nil {
				return asUsage(err)
			}
			if cmd.Flags().Changed("dispatchers") {
				o.Config.Relay.Dispatchers = &dispatchers
			}
			if err := o.Validate(); err != nil {
				return asUsage(err)
			}
			return runRelay(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&configPath, "config", "", "YAML config file, the one chronos nas reads (keys may also come from CHRONOS_NAS_* variables)")
	c.Flags().StringVar(&o.Listen, "listen", "", "address for /healthz, /readyz and /metrics (empty: none)")
	c.Flags().IntVar(&dispatchers, "dispatchers", 0, "dispatchers to run (overrides relay.dispatchers)")
	c.Flags().DurationVar(&o.Lease, "lease", 0, "lease per claim: how soon the fires of a crashed relay are retried (default 30s)")
	c.Flags().StringVar(&o.CronKeyEncryptionKeyFile, "cron-key-encryption-key-file", "", "file of the key direct fires' cron keys are sealed under (overrides relay.cron_key_encryption_key_file)")
	return c
}

// runRelay runs the dispatchers until ctx ends, then drains them; o's
// Logger is made here, at the configured log_level.
func runRelay(ctx context.Context, o node.RelayOptions, stderr io.Writer) (err error) {
	if o.Logger, err = jsonLogger(stderr, "log_level", o.Config.LogLevel); err != nil {
		return err
	}
	return node.RunRelay(ctx, o)
}
