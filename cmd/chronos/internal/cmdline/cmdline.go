// Package cmdline holds what the chronos command line needs around cobra: an
// error kind for bad usage or input (exit code 2), the marking of cobra's own
// argument and flag complaints as such, running a command tree to an exit
// code, commands that only group others, and the one way commands print
// their result (text, or JSON under --json).
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/internal/termtext"
)

// Exit codes of the command line.
const (
	ExitOK      = 0 // the command did what it was asked
	ExitFailure = 1 // it failed: NAS, the store, a run, the file system
	ExitUsage   = 2 // bad usage or bad input: nothing was changed
)

// Execute runs the command tree root on args and returns the exit code. An
// error is printed on stderr as "chronos: message" (escaped for the
// terminal, newlines kept); stdout carries only what the command printed.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return AsUsage(err) })
	// Unknown subcommands and wrong argument counts are usage errors too.
	for _, c := range root.Commands() {
		MarkUsage(c)
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	// cobra indents its "Did you mean this?" suggestions with a tab, which
	// the escaping would print as a literal \t.
	msg := strings.TrimRight(strings.ReplaceAll(err.Error(), "\n\t", "\n    "), "\n")
	fmt.Fprintf(stderr, "%s: %s\n", root.Name(), termtext.Escape(msg, termtext.KeepNewlines))
	if IsUsage(err) {
		return ExitUsage
	}
	var coded *CodedError
	if errors.As(err, &coded) {
		return coded.Code
	}
	return ExitFailure
}

// CodedError is an error a command ends with under an exit code of its own
// (above 2), documented with the command: a refusal a script tells apart.
type CodedError struct {
	Code int
	Err  error
}

func (e *CodedError) Error() string { return e.Err.Error() }
func (e *CodedError) Unwrap() error { return e.Err }

// WithCode returns err to end the command with exit code code; nil stays
// nil, and a code of 0 leaves err as it is (exit 1).
func WithCode(code int, err error) error {
	if err == nil || code == 0 {
		return err
	}
	return &CodedError{Code: code, Err: err}
}

// UsageError marks an error caused by bad usage or bad input.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a usage error with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// AsUsage wraps err as a usage error; nil stays nil.
func AsUsage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}

// IsUsage reports whether err is a usage error or cobra's own complaint
// about the command line.
func IsUsage(err error) bool {
	var ue *UsageError
	if errors.As(err, &ue) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "requires at least", "accepts ", "invalid argument", "flags in the group"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// MarkUsage makes the argument and flag validation failures of c and every
// command under it usage errors. A failure that does not name its command
// (a wrong argument count) is told with the command and its usage line.
func MarkUsage(c *cobra.Command) {
	if c.Args != nil {
		orig := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := orig(cmd, args)
			if err == nil {
				return nil
			}
			if !strings.Contains(err.Error(), cmd.CommandPath()) {
				path := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
				err = fmt.Errorf("%s: %w (usage: %s)", path, err, cmd.UseLine())
			}
			return AsUsage(err)
		}
	}
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return AsUsage(err) })
	for _, sub := range c.Commands() {
		MarkUsage(sub)
	}
}

// Group returns a command that only holds subcommands: run without one, it
// prints help; with an unknown one, it is a usage error.
func Group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	c.AddCommand(subs...)
	return c
}

// unknownSubcommand refuses any argument of a group command as an unknown
// subcommand, with cobra's suggestions of the subcommands it may have meant
// (a group is not a root, for which cobra would suggest itself).
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return errors.New(msg)
}
