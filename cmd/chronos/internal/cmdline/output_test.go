package cmdline_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

// printer is a command that prints v through Output, a line aside, and
// fails with fail when it is set.
func printer(v any, fail error) *cobra.Command {
	var out cmdline.Output
	return out.Register(&cobra.Command{Use: "show", Short: "show", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fail != nil {
				return fail
			}
			if err := out.Print(cmd.OutOrStdout(), v, cmdline.Textf("n=%d", 7)); err != nil {
				return err
			}
			_, err := io.WriteString(out.Aside(cmd), "aside\n")
			return err
		}}, "the thing")
}

func TestOutputAndExecute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		cmd            *cobra.Command
		args           []string
		code           int
		stdout, stderr string
	}{
		{"text", printer(map[string]int{"n": 7}, nil), []string{"show"}, cmdline.ExitOK, "n=7\naside\n", ""},
		{"json", printer(map[string]int{"n": 7}, nil), []string{"show", "--json"}, cmdline.ExitOK, "{\n  \"n\": 7\n}\n", "aside\n"},
		{"failure", printer(nil, errors.New("nas answered 503\n\x1b[2J")), []string{"show", "--json"}, cmdline.ExitFailure, "", "root: nas answered 503\n\\x1b[2J\n"},
		{"usage", printer(nil, cmdline.Usagef("bad --n")), []string{"show"}, cmdline.ExitUsage, "", "root: bad --n\n"},
		{"bad flag", printer(nil, nil), []string{"show", "--nope"}, cmdline.ExitUsage, "", "root: unknown flag: --nope\n"},
		{"extra argument", printer(nil, nil), []string{"show", "x"}, cmdline.ExitUsage, "", "root: unknown command \"x\" for \"root show\"\n"},
		{"unknown command", printer(nil, nil), []string{"nope"}, cmdline.ExitUsage, "", "root: unknown command \"nope\" for \"root\"\n"},
		{"wrong argument count", cmdline.Group("grp", "a group", &cobra.Command{Use: "rm ID", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return nil }}),
			[]string{"grp", "rm", "a", "b"}, cmdline.ExitUsage, "", "root: grp rm: accepts 1 arg(s), received 2 (usage: root grp rm ID [flags])\n"},
		{"suggestion in a group", cmdline.Group("grp", "a group", &cobra.Command{Use: "list", RunE: func(*cobra.Command, []string) error { return nil }}),
			[]string{"grp", "lst"}, cmdline.ExitUsage, "", "root: unknown command \"lst\" for \"root grp\"\n\nDid you mean this?\n    list\n"},
		{"suggestion at the root", printer(nil, nil), []string{"shwo"}, cmdline.ExitUsage, "", "root: unknown command \"shwo\" for \"root\"\n\nDid you mean this?\n    show\n"},
		{"unencodable", printer(func() {}, nil), []string{"show", "--json"}, cmdline.ExitFailure, "", "root: write json: json: unsupported type: func()\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			root := cmdline.Group("root", "a group", tc.cmd)
			code := cmdline.Execute(context.Background(), root, tc.args, &stdout, &stderr)
			if code != tc.code || stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}
