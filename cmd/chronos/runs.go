package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newRunsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "runs",
		Short: "Read the run ledger",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("runs: not built yet")
		},
	}
}
