package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "agent",
		Short: "Run and inspect the agent sidecar",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent: not built yet")
		},
	}
}
