package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newKeysCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keys",
		Short: "Manage NAS signing keys",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("keys: not built yet")
		},
	}
}
