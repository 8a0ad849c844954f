package main

import (
	"fmt"
	"os"
	"strings"

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
			restore := escapeForMarkdown(cmd.Root())
			defer restore()
			if err := doc.GenManTree(cmd.Root(), header, args[0]); err != nil {
				return fmt.Errorf("man: %w", err)
			}
			return nil
		},
	}
}

// markdownBrackets escapes the parenthesis after a closing square bracket
// in command texts: the man pages are written through Markdown, which reads
// "[flags] (-- COMMAND)" as a link and prints it garbled.
var markdownBrackets = strings.NewReplacer("] (", `] \(`, "](", `]\(`)

// escapeForMarkdown escapes the usage line and the long text of c and of
// every command under it for the Markdown the man pages are made from, and
// returns the function that puts them back.
func escapeForMarkdown(c *cobra.Command) (restore func()) {
	use, long := c.Use, c.Long
	c.Use, c.Long = markdownBrackets.Replace(use), markdownBrackets.Replace(long)
	var subs []func()
	for _, sub := range c.Commands() {
		subs = append(subs, escapeForMarkdown(sub))
	}
	return func() {
		c.Use, c.Long = use, long
		for _, r := range subs {
			r()
		}
	}
}
