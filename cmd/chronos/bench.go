package main

import "github.com/spf13/cobra"

func newBenchCmd() *cobra.Command {
	return groupCmd("bench", "Measure Chronos on this machine", newBenchRelayCmd())
}
