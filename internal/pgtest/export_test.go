package pgtest

import (
	"fmt"
	"io"
	"os"
)

// EnvChild, when set, makes the test binary a child process of a process
// test instead of running tests: "cluster" starts a cluster, prints its
// postmaster's pid and its directory, and waits; "wait" only waits. Both
// wait until their standard input ends.
const EnvChild = "CHRONOS_PGTEST_CHILD"

// ChildMain runs the child process EnvChild names and returns its exit
// code.
func ChildMain(mode string) int {
	switch mode {
	case "cluster":
		c, err := start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer c.stop()
		fmt.Printf("%d %s\n", c.pid, c.dir)
	case "wait":
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: unknown mode\n", EnvChild, mode)
		return 2
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
