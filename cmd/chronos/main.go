// Command chronos is the one Chronos binary: the NAS service, the relay
// dispatchers, the agent sidecar, the job CLI and the demo.
//
// Only this package reads flags, the environment and files, and wires the
// parts together. Exit codes: 0 ok, 1 failure, 2 bad usage or input.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes of the binary.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error caused by bad usage or bad input: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usage error (exit 2) with a formatted message.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// asUsage wraps err as a usage error (exit 2); nil stays nil.
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err: err}
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
	var ue *usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return exitUsage
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
		newRunsCmd(),
		newScheduleCmd(),
		newKeysCmd(),
		newDLQCmd(),
		newBenchCmd(),
	)
	// Unknown subcommands and wrong argument counts are usage errors too.
	for _, c := range root.Commands() {
		markUsage(c)
	}
	return root
}

// markUsage makes argument validation failures of c and its children usage errors.
func markUsage(c *cobra.Command) {
	if c.Args != nil {
		orig := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error { return asUsage(orig(cmd, args)) }
	}
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return asUsage(err) })
	for _, sub := range c.Commands() {
		markUsage(sub)
	}
}

// isCobraUsage reports whether err is cobra's own complaint about the command line.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "requires at least", "accepts ", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// groupCmd returns a command that only holds subcommands: run without one, it
// prints help; with an unknown one, it is a usage error.
func groupCmd(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	c.AddCommand(subs...)
	return c
}
