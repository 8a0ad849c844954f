package cmdline_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	if cmdline.AsUsage(nil) != nil {
		t.Error("AsUsage(nil) is not nil")
	}
	for _, err := range []error{cmdline.Usagef("bad %d", 1), fmt.Errorf("wrapped: %w", cmdline.AsUsage(errors.New("x"))), errors.New(`unknown flag: --nope`)} {
		if !cmdline.IsUsage(err) {
			t.Errorf("%v is not a usage error", err)
		}
	}
	if cmdline.IsUsage(errors.New("connection refused")) {
		t.Error("a failure counts as usage")
	}
}

func TestMarkUsageAndGroup(t *testing.T) {
	t.Parallel()
	leaf := &cobra.Command{Use: "leaf", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return nil }}
	root := cmdline.Group("root", "a group", leaf)
	root.SilenceErrors, root.SilenceUsage = true, true
	cmdline.MarkUsage(root)
	root.SetArgs([]string{"leaf"})
	if err := root.Execute(); !cmdline.IsUsage(err) {
		t.Fatalf("missing argument: %v, want a usage error", err)
	}
	// Flags that exclude each other, given together: cobra's flag groups.
	excl := &cobra.Command{Use: "excl", RunE: func(*cobra.Command, []string) error { return nil }}
	excl.Flags().Bool("a", false, "")
	excl.Flags().Bool("b", false, "")
	excl.MarkFlagsMutuallyExclusive("a", "b")
	root.AddCommand(excl)
	root.SetArgs([]string{"excl", "--a", "--b"})
	if err := root.Execute(); err == nil || !cmdline.IsUsage(err) {
		t.Fatalf("--a --b: %v, want a usage error", err)
	}
	var ue *cmdline.UsageError
	root.SetArgs([]string{"leaf", "a", "b"})
	if err := root.Execute(); !errors.As(err, &ue) {
		t.Fatalf("extra argument: %v, want a *UsageError", err)
	}
}
