package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newScheduleCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schedule",
		Short: "Parse schedules and print their next fire times",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("schedule: not built yet")
		},
	}
}
