// Command chronos is the one Chronos binary: the NAS service, the relay
// dispatchers, the agent sidecar, the job CLI, the operator commands and the
// demo.
//
// Only this package reads flags, the environment and files, and wires the
// parts together. Exit codes: 0 ok, 1 failure, 2 bad usage or input, and
// for the chain commands' refusals 3-6 (see docs/cli.md); every command
// that prints data takes --json.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

// Exit codes of the binary.
const (
	exitOK      = cmdline.ExitOK
	exitFailure = cmdline.ExitFailure
	exitUsage   = cmdline.ExitUsage
)

// usagef returns a usage error (exit 2) with a formatted message.
func usagef(format string, args ...any) error { return cmdline.Usagef(format, args...) }

// asUsage wraps err as a usage error (exit 2); nil stays nil.
func asUsage(err error) error { return cmdline.AsUsage(err) }

// groupCmd returns a command that only holds subcommands (see cmdline.Group).
func groupCmd(use, short string, subs ...*cobra.Command) *cobra.Command {
	return cmdline.Group(use, short, subs...)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cmdline.Execute(ctx, newRootCmd(), args, stdout, stderr)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "chronos",
		Short: "Managed cron for agents that scale to zero",
		Long: `Chronos keeps cron promises for agents that are stopped between fires: the agent owns time, NAS owns delivery.

Every command that prints data takes --json (one JSON document on stdout).
Exit codes: 0 ok, 1 failure, 2 bad usage or input (nothing changed); the chain
commands' refusals are 3 duplicate, 4 limit, 5 breaker open, 6 chain closed.
Shell completion: chronos completion bash|zsh|fish|powershell; man pages: chronos man DIR.`,
	}
	root.AddCommand(newVersionCmd(), newDemoCmd(), newNASCmd(), newRelayCmd(), newAgentCmd(), newJobsCmd(), newChainCmd(),
		newChainsCmd(), newRunsCmd(), newNotifyCmd(), newScheduleCmd(), newKeysCmd(), newDLQCmd(), newInstanceCmd(), newBenchCmd(), newManCmd(), newHealthcheckCmd())
	return root
}
