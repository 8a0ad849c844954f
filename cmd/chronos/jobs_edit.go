package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/jobfile"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

func (c *jobsCLI) addCmd() *cobra.Command {
	var o jobfile.Flags
	var out cmdline.Output
	var file string
	cmd := &cobra.Command{
		Use:   "add --schedule S [flags] (-- COMMAND [ARGS...] | --http-url URL)",
		Short: "Add a job and show how its schedule was understood",
		Long: `Add a job to the store and print its id, how the schedule was understood, its next
three fires and how it was armed: through the agent that serves the home (the one
started with --config records its config there, or $CHRONOS_AGENT_CONFIG names it).

The payload is either a command after "--" (one argument runs with "sh -c", several run
directly) or an HTTP request (--http-url and the other --http-* flags).
--notify KIND:DEST[@EVENT,...] (webhook:URL, file:/ABS/PATH or command:LINE) tells a target
what the runs did (EVENTs: succeeded, failed, missed, interrupted, recovered, partial or all).
--flex DURATION gives the job a flexible window: NAS may deliver each slot's fire anywhere
up to DURATION after the slot (it spreads such fires), and the run counts as the slot's.`,
		Example: `  chronos jobs add --schedule 'every 2s' -- 'date >> /tmp/ticks'
  chronos jobs add --schedule 'weekdays at 9am' --tz Europe/Paris --window daily -- /usr/local/bin/brief
  chronos jobs add --schedule 'daily at 3am' --notify webhook:https://hooks.example.com/x --notify-after 2 -- /usr/local/bin/backup
  chronos jobs add --schedule '*/5 * * * *' --http-url https://example.org/hook --http-method POST
  chronos jobs add --schedule 'daily at 2am' --flex 30m -- /usr/local/bin/report
  chronos jobs add --id digest --schedule 'daily at 2:30pm' --kind workflow --depends-on scan,sweep --window 24h -- /opt/jobs/digest.sh
  chronos jobs add --id scan --schedule 'daily at 6am' --kind fanout --inputs-from file:///etc/targets.txt --concurrency 4 \
      --partial-tolerance 0.1 --reducer 'merge /var/lib/scans' --reducer-run-on any_success -- 'scan "$FANOUT_ITEM"'
  chronos jobs add --file job.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := o.Spec(cmd.Flags(), args, cmd.ArgsLenAtDash())
			if file != "" && err == nil {
				spec, err = c.readSpec(file, cmd.InOrStdin())
			}
			if err != nil {
				return asUsage(err)
			}
			cl, rt, t, err := c.reach(cmd.Context())
			if err != nil {
				return err
			}
			if spec.Notify, err = checkNotify(cmd, t, o.NotifyChange(cmd.Flags())); err != nil {
				return err
			}
			if cl != nil {
				in, err := cl.AddJob(cmd.Context(), spec)
				if err == nil {
					err = printJob(cmd.OutOrStdout(), out, "added", in)
					fmt.Fprintln(out.Aside(cmd), termSafe(cl.Made(t.Home)))
				}
				return jobError(err)
			}
			defer closeRuntime(rt)
			j, _, err := rt.AddJob(cmd.Context(), spec)
			if err != nil {
				return jobError(err)
			}
			if err := printJob(cmd.OutOrStdout(), out, "added", localapi.InfoOf(rt, &j)); err != nil {
				return err
			}
			return c.changed(cmd.Context(), out.Aside(cmd), t, rt, &j)
		},
	}
	o.Register(cmd.Flags())
	o.RegisterAdd(cmd.Flags())
	cmd.Flags().StringVar(&file, "file", "", "read the job from a YAML or JSON spec file ('-': stdin) instead of flags")
	return out.Register(cmd, "the job")
}

func (c *jobsCLI) editCmd() *cobra.Command {
	var o jobfile.Flags
	var out cmdline.Output
	cmd := &cobra.Command{
		Use:   "edit ID [flags] [-- COMMAND [ARGS...]]",
		Short: "Change a job, keeping its id, its history and its idempotency window",
		Long: `Change the flags given (the same as jobs add's) and nothing else. The job keeps its id,
its ledger history, its idempotency window and whether it is paused, and is armed again
at once through the agent that serves the home. A new --schedule or --tz counts from the
edit. A new command after "--" or a new --http-url replaces the payload (give --env, --dir
and the --http-* flags with it). Any --notify replaces the job's notify targets (--notify
none removes them). Bad input changes nothing.`,
		Example: `  chronos jobs edit backup --schedule 'daily at 3am'
  chronos jobs edit backup --flex 15m
  chronos jobs edit backup --window daily -- /usr/local/bin/backup --full`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			patch, err := o.Patch(cmd.Flags(), args[1:], cmd.ArgsLenAtDash())
			if err != nil {
				return asUsage(err)
			}
			rt, t, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			if patch.Notify != nil {
				if _, err = checkNotify(cmd, t, *patch.Notify); err != nil {
					return err
				}
			}
			j, _, err := rt.EditJob(cmd.Context(), args[0], patch)
			if err != nil {
				return jobError(err)
			}
			if err := printJob(cmd.OutOrStdout(), out, "edited", localapi.InfoOf(rt, &j)); err != nil {
				return err
			}
			return c.changed(cmd.Context(), out.Aside(cmd), t, rt, &j)
		},
	}
	o.Register(cmd.Flags())
	return out.Register(cmd, "the job")
}

// readSpec reads a job spec file ('-': in) within the limit of the agent
// config of the home (max_spec_file_bytes).
func (c *jobsCLI) readSpec(file string, in io.Reader) (agent.JobSpec, error) {
	t, err := target(c.home)
	if err != nil {
		return agent.JobSpec{}, err
	}
	return jobfile.Read(file, in, t.Config.SpecFileLimit())
}
