package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
	"github.com/chronoscron/chronos/nas/node"
)

// defaultMigrateTimeout bounds a migration run: reaching the database,
// waiting for another process's migration, applying the pending steps.
const defaultMigrateTimeout = 5 * time.Minute

func newNASMigrateCmd() *cobra.Command {
	var out cmdline.Output
	var configPath string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "migrate [--config nas.yaml] [--json]",
		Short: "Bring the store's schema up to this binary's version",
		Long: `Bring the schema of a PostgreSQL store up to this binary's version and say
what was done: the versions before and after and the migrations applied. The
store is found as chronos nas finds it (--config, CHRONOS_NAS_CONFIG, the
CHRONOS_NAS_* variables), so run it with NAS's own configuration before
starting (or upgrading) NAS and the relay processes, or set store_migrate:
true to have each process migrate as it starts.

It is safe to run from several processes at once: one applies the pending
migrations in one transaction while the others wait for it and then find
nothing to do. A database whose schema a newer chronos wrote is refused and
left untouched (exit 1), as is one that cannot be reached within --timeout.
A memory or Redis store has no schema: it says so and exits 0.`,
		Example: "  chronos nas migrate --config /etc/chronos/nas.yaml\n  CHRONOS_NAS_STORE=postgres://chronos@db/chronos chronos nas migrate --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usagef("--timeout %s: must be positive", timeout)
			}
			cfg, err := loadNASConfig(configPath)
			if err != nil {
				return err
			}
			log, err := jsonLogger(cmd.ErrOrStderr(), "log_level", cfg.LogLevel)
			if err != nil {
				return err
			}
			m, err := migrateStore(cmd.Context(), cfg.Store, timeout, log)
			if err != nil {
				return err
			}
			return out.Print(cmd.OutOrStdout(), m, cmdline.Textf("%s", m))
		},
	}
	c.Flags().StringVar(&configPath, "config", "", "YAML config file, the one chronos nas reads (env CHRONOS_NAS_CONFIG; keys may also come from CHRONOS_NAS_* variables)")
	c.Flags().DurationVar(&timeout, "timeout", defaultMigrateTimeout, "give up after this long: reaching the database, waiting for another process's migration, applying")
	return out.Register(c, "what was done")
}

// migrateStore runs node.MigrateStore on store within timeout.
func migrateStore(ctx context.Context, store string, timeout time.Duration, log *slog.Logger) (node.Migration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return node.MigrateStore(ctx, store, log)
}
