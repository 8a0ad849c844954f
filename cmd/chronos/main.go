// Command chronos is the one Chronos binary: the NAS service, the relay
// dispatchers, the agent sidecar, the job CLI and the demo.
//
// Only this package reads flags, the environment and files, and wires the
// parts together. Exit codes: 0 ok, 1 failure, 2 bad usage or input; the
// chain commands add 3-6 (see chain.ExitCode).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/internal/cmdline"
)

// Exit codes of the binary.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
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
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "chronos: %s\n", termSafeLines(err.Error()))
	if cmdline.IsUsage(err) {
		return exitUsage
	}
	if code := chain.ExitCode(err); code != 0 {
		return code
	}
	return exitFailure
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "chronos",
		Short:         "Managed cron for agents that scale to zero",
		Long:          "Chronos keeps cron promises for agents that are stopped between fires: the agent owns time, NAS owns delivery.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return asUsage(err) })
	root.AddCommand(
		newVersionCmd(),
		newDemoCmd(),
		newNASCmd(),
		newRelayCmd(),
		newAgentCmd(),
		newJobsCmd(),
		newChainCmd(),
		newChainsCmd(),
		newRunsCmd(),
		newNotifyCmd(),
		newScheduleCmd(),
		newKeysCmd(),
		newDLQCmd(),
		newBenchCmd(),
	)
	// Unknown subcommands and wrong argument counts are usage errors too.
	for _, c := range root.Commands() {
		cmdline.MarkUsage(c)
	}
	return root
}
