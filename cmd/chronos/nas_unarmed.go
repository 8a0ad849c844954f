package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/contract"
)

func newNASUnarmedCmd() *cobra.Command {
	var flags operatorFlags
	var agent string
	var asJSON bool
	c := &cobra.Command{
		Use:   "unarmed [--config nas.yaml] [--agent A] [--json]",
		Short: "List jobs left without an armed fire after their last fire",
		Long: `List the jobs NAS holds no armed fire for although their last fire was
delivered, dropped (the operator stopped the instance) or dead-lettered at
least unarmed_after ago, and that their agent neither armed again nor
cancelled since: typically an agent that stopped before it armed its next
slot. Oldest first. --config takes NAS's internal URL and operator token
from NAS's config file, as chronos dlq does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			oc, err := flags.client()
			if err != nil {
				return err
			}
			resp, err := oc.Unarmed(cmd.Context(), agent)
			if err != nil {
				return fmt.Errorf("nas unarmed: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if resp.Unarmed == nil {
					resp.Unarmed = []contract.UnarmedJob{}
				}
				return printJSON(out, resp)
			}
			if len(resp.Unarmed) == 0 {
				fmt.Fprintf(out, "no job is left without an armed fire (unarmed_after %s)\n", resp.UnarmedAfter)
				return nil
			}
			now := time.Now()
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tINSTANCE\tJOB\tLAST_FIRE_AT\tOUTCOME\tUNARMED_FOR\tREASON")
			for _, u := range resp.Unarmed {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", u.AgentID, u.InstanceID, u.JobID, u.FireAt, u.Outcome,
					now.Sub(u.OutcomeAt.Time).Round(time.Second), u.Reason)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if resp.Truncated {
				fmt.Fprintf(out, "(more than %d; narrow with --agent)\n", len(resp.Unarmed))
			}
			return nil
		},
	}
	flags.register(c)
	c.Flags().StringVar(&agent, "agent", "", "only this agent's jobs")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
