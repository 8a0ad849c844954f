package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run NAS, its relay and an agent in one process with sample jobs",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("demo: not built yet")
		},
	}
}
