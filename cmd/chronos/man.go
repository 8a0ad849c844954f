package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "man DIR",
		Short: "Write man pages for every command to DIR",
		Long: `Write a man page (section 1) for chronos and for every command under it to DIR,
generated from the command tree: chronos.1, chronos-jobs.1, chronos-jobs-add.1 and so
on. DIR is created if missing; pages already there are replaced. The pages are dated
SOURCE_DATE_EPOCH when it is set (reproducible builds), else today.`,
		Example: "  chronos man /usr/local/share/man/man1 && mandb -q\n  chronos man ./man && man ./man/chronos-jobs-add.1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return fmt.Errorf("man: %w", err)
			}
			header := &doc.GenManHeader{Section: "1", Source: "chronos " + version, Manual: "Chronos Manual"}
			if err := doc.GenManTree(cmd.Root(), header, args[0]); err != nil {
				return fmt.Errorf("man: %w", err)
			}
			return nil
		},
	}
}
