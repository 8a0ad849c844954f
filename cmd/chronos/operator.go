package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/operator"
)

// operatorFlags are the connection flags of the operator commands.
type operatorFlags struct {
	nasURL, token, config string
	// getenv reads the environment; nil is os.LookupEnv.
	getenv func(string) (string, bool)
}

func (f *operatorFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.nasURL, "nas-url", "", "base URL of NAS's internal listener (env CHRONOS_NAS_URL)")
	c.Flags().StringVar(&f.token, "operator-token", "", "the operator token (env CHRONOS_OPERATOR_TOKEN or CHRONOS_NAS_OPERATOR_TOKEN)")
	c.Flags().StringVar(&f.config, "config", "", "NAS's config file: the URL and token default to its relay.nas_url and operator_token")
}

// client finds NAS: the flags, then NAS's config file, then the environment.
func (f *operatorFlags) client() (*operator.Client, error) {
	getenv := f.getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	c, err := operator.Resolve(operator.Source{URL: f.nasURL, Token: f.token, ConfigFile: f.config, Getenv: getenv,
		LoadConfig: func(path string) (nas.Config, error) { return loadNASConfig(path, getenv) }})
	return c, asUsage(err)
}

// operatorList are the settings of a listing operator command.
type operatorList struct {
	flags  operatorFlags
	agent  string
	asJSON bool
}

func (l *operatorList) register(c *cobra.Command, agentHelp string) *cobra.Command {
	l.flags.register(c)
	c.Flags().StringVar(&l.agent, "agent", "", agentHelp)
	c.Flags().BoolVar(&l.asJSON, "json", false, "print JSON")
	return c
}

// printJSON writes v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newDLQCmd() *cobra.Command {
	return groupCmd("dlq", "Inspect and replay the dead letter", newDLQListCmd(), newDLQReplayCmd())
}

func newDLQListCmd() *cobra.Command {
	var l operatorList
	return l.register(&cobra.Command{
		Use:   "list [--agent A] [--json]",
		Short: "List dead-lettered fires, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			oc, err := l.flags.client()
			if err != nil {
				return err
			}
			all, err := oc.DeadLetters(cmd.Context(), l.agent)
			if err != nil {
				return fmt.Errorf("dlq list: %w", err)
			}
			if l.asJSON {
				return printJSON(cmd.OutOrStdout(), all)
			}
			if len(all) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "the dead letter is empty")
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEDULE_ID\tAGENT\tJOB\tFIRE_AT\tATTEMPTS\tFAILED_AT\tREASON")
			for _, d := range all {
				// The reason quotes the agent's answer: escaped like all remote text.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", termSafeArgs([]any{d.ScheduleID, d.AgentID, d.JobID, d.FireAt.String(), d.Attempts, d.FailedAt.String(), d.Reason})...)
			}
			return tw.Flush()
		},
	}, "only this agent's entries")
}

func newDLQReplayCmd() *cobra.Command {
	var flags operatorFlags
	var agent string
	c := &cobra.Command{
		Use:   "replay [--agent A | SCHEDULE_ID...]",
		Short: "Deliver dead-lettered fires again (due now, attempts reset)",
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case agent != "" && len(args) > 0:
				return usagef("dlq replay: give --agent or schedule ids, not both")
			case agent == "" && len(args) == 0:
				return usagef("dlq replay: give --agent A or at least one schedule id")
			}
			oc, err := flags.client()
			if err != nil {
				return err
			}
			resp, err := oc.Replay(cmd.Context(), contract.DLQReplayRequest{AgentID: agent, ScheduleIDs: args})
			if ce := (*contract.Error)(nil); errors.As(err, &ce) && ce.Code == contract.CodeInvalidRequest {
				return asUsage(fmt.Errorf("dlq replay: %w", err))
			} else if err != nil {
				return fmt.Errorf("dlq replay: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replayed %d\n", resp.Replayed)
			return nil
		},
	}
	flags.register(c)
	c.Flags().StringVar(&agent, "agent", "", "replay all of this agent's dead letters")
	return c
}

func newNASUnarmedCmd() *cobra.Command {
	var l operatorList
	return l.register(&cobra.Command{
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
			oc, err := l.flags.client()
			if err != nil {
				return err
			}
			resp, err := oc.Unarmed(cmd.Context(), l.agent)
			if err != nil {
				return fmt.Errorf("nas unarmed: %w", err)
			}
			out := cmd.OutOrStdout()
			if l.asJSON {
				if resp.Unarmed == nil {
					resp.Unarmed = []contract.UnarmedJob{}
				}
				return printJSON(out, resp)
			}
			if len(resp.Unarmed) == 0 {
				_, err := fmt.Fprintf(out, "no job is left without an armed fire (unarmed_after %s)\n", resp.UnarmedAfter)
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tINSTANCE\tJOB\tLAST_FIRE_AT\tOUTCOME\tUNARMED_FOR\tREASON")
			for _, u := range resp.Unarmed {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", u.AgentID, u.InstanceID, u.JobID, u.FireAt, u.Outcome,
					time.Since(u.OutcomeAt.Time).Round(time.Second), u.Reason)
			}
			if err := tw.Flush(); err != nil || !resp.Truncated {
				return err
			}
			_, err = fmt.Fprintf(out, "(more than %d; narrow with --agent)\n", len(resp.Unarmed))
			return err
		},
	}, "only this agent's jobs")
}
