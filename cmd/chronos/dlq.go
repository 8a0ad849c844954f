package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newDLQCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and replay the dead letter",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("dlq: not built yet")
		},
	}
}
