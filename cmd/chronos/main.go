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
	"log/slog"
	"os"
	"os/signal"
	"sync"
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
		if len(msg) >= len(p) && contains(msg, p) {
			return true
		}
	}
	return false
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
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

// awaitStop waits until ctx ends or one part of a long-running command
// reports on errc, then cancels the rest with cancel, waits for wg and
// returns the first failure. A part that ends with context.Canceled has
// only been told to stop. errc must have room for a report from every part
// in wg; name prefixes the log messages.
func awaitStop(ctx context.Context, cancel context.CancelFunc, wg *sync.WaitGroup, errc chan error, log *slog.Logger, name string) error {
	var firstErr error
	select {
	case <-ctx.Done():
	case firstErr = <-errc:
		if firstErr != nil {
			log.Error(name+" stopping", "error", firstErr.Error())
		}
	}
	cancel()
	wg.Wait()
	close(errc)
	for err := range errc {
		if firstErr == nil && err != nil && !errors.Is(err, context.Canceled) {
			firstErr = err
		}
	}
	log.Info(name + " stopped")
	return firstErr
}
