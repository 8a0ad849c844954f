package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newRelayCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "relay",
		Short: "Run relay dispatchers only",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("relay: not built yet")
		},
	}
}
