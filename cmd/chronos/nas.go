package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

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
the effective configuration with each key's variable, secrets redacted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkNASEnv(os.Environ()); err != nil {
				return asUsage(err)
			}
			if configPath == "" {
				configPath = os.Getenv(nasEnvPrefix + "CONFIG")
			}
			cfg, err := loadNASConfig(configPath, os.LookupEnv)
			if err != nil {
				return asUsage(err)
			}
			if printConfig {
				// An unset signing_alg is the keys dir's: show which, when
				// the dir can be read from here.
				if cfg.SigningAlg == "" && cfg.SigningKeysDir != "" {
					if set, err := nas.LoadKeyDir(cfg.SigningKeysDir, ""); err == nil {
						cfg.SigningAlg = set.Active.Alg
					}
				}
				out, err := printNASConfig(cfg)
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
	c.AddCommand(newNASUnarmedCmd())
	return c
}

// newNASLogger returns a JSON logger on w at the configured log_level; a
// level that is not one of the four is a usage error naming the key.
func newNASLogger(w io.Writer, level string) (*slog.Logger, error) {
	l, err := parseLogLevel("log_level", level)
	if err != nil {
		return nil, err
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: durationText})), nil
}

// parseLogLevel reads a log level as NAS, relay and agent accept it: debug,
// info, warn or error, in any case. slog's offsets ("warn+2") are not
// accepted: they are no level an operator can look up. A bad level is a
// usage error naming key, the setting it came from.
func parseLogLevel(key, level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, usagef("%s: %q is not debug, info, warn or error", key, level)
}

// durationText writes a time.Duration attribute as a Go duration string
// ("276ms") instead of the JSON handler's integer nanoseconds: the rule for
// every duration in the logs of NAS, the relay and the agent (a key ending
// in a unit, such as lag_ms, carries a number in that unit instead). Call
// sites pass d.String() themselves, for loggers the binary does not build;
// this catches any that does not.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// runNAS runs NAS until ctx ends (SIGTERM/interrupt), then shuts down.
func runNAS(ctx context.Context, cfg nas.Config, stderr io.Writer) error {
	log, err := newNASLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	n, err := node.New(ctx, node.Options{Config: cfg, Logger: log})
	if err != nil {
		return err
	}
	return n.Run(ctx)
}
