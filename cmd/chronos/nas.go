package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newNASCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "nas",
		Short: "Run the NAS service (API and, unless disabled, dispatchers)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("nas: not built yet")
		},
	}
}
