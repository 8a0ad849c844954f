package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newJobsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "jobs",
		Short: "Manage jobs in the agent's store",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("jobs: not built yet")
		},
	}
}
