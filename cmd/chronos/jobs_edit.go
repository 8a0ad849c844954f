package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/jobfile"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/store"
)

func (c *jobsCLI) addCmd() *cobra.Command {
	var o jobFlags
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
what the runs did (EVENTs: succeeded, failed, missed, interrupted, recovered or all).`,
		Example: `  chronos jobs add --schedule 'every 2s' -- 'date >> /tmp/ticks'
  chronos jobs add --schedule 'weekdays at 9am' --tz Europe/Paris --window daily -- /usr/local/bin/brief
  chronos jobs add --schedule 'daily at 3am' --notify webhook:https://hooks.example.com/x --notify-after 2 -- /usr/local/bin/backup
  chronos jobs add --schedule '*/5 * * * *' --http-url https://example.org/hook --http-method POST
  chronos jobs add --id digest --schedule 'daily at 2:30pm' --kind workflow --depends-on scan,sweep --window 24h -- /opt/jobs/digest.sh
  chronos jobs add --id scan --schedule 'daily at 6am' --kind fanout --inputs-from file:///etc/targets.txt --concurrency 4 \
      --partial-tolerance 0.1 --reducer 'merge /var/lib/scans' --reducer-run-on any_success -- 'scan "$FANOUT_ITEM"'
  chronos jobs add --file job.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := o.addSpec(cmd, args)
			if file != "" && err == nil {
				spec, err = jobfile.Read(file, cmd.InOrStdin())
			}
			if err != nil {
				return asUsage(err)
			}
			cl, rt, t, err := c.reach(cmd.Context())
			if err != nil {
				return err
			}
			ch, err := o.notifyChange(cmd, t)
			if err != nil {
				return err
			}
			if spec.Notify, err = ch.Apply(notify.Policy{}); err != nil {
				return err
			}
			if cl != nil {
				in, err := cl.AddJob(cmd.Context(), spec)
				if err == nil {
					err = o.printJob(cmd.OutOrStdout(), "added", in)
					fmt.Fprintln(o.out.Aside(cmd), termSafe(cl.Made(t.Home)))
				}
				return jobError(err)
			}
			defer closeRuntime(rt)
			j, _, err := rt.AddJob(cmd.Context(), spec)
			if err != nil {
				return jobError(err)
			}
			if err := o.printJob(cmd.OutOrStdout(), "added", localapi.InfoOf(rt, &j)); err != nil {
				return err
			}
			return c.changed(cmd.Context(), o.out.Aside(cmd), t, rt, &j)
		},
	}
	o.register(cmd.Flags())
	cmd.Flags().StringVar(&o.spec.ID, "id", "", "job id (default generated): letters, digits, . _ -")
	cmd.Flags().Bool("paused", false, "create the job paused")
	cmd.Flags().StringVar(&file, "file", "", "read the job from a YAML or JSON spec file ('-': stdin) instead of flags")
	o.kind.Register(cmd.Flags())
	return cmd
}

// addSpec is the job jobs add asks for through its flags (nothing under
// --file, which must come alone).
func (o *jobFlags) addSpec(cmd *cobra.Command, args []string) (agent.JobSpec, error) {
	spec := o.spec
	if cmd.Flags().Changed("file") {
		var err error
		cmd.Flags().Visit(func(f *pflag.Flag) {
			if f.Name != "file" && f.Name != "json" && f.Name != "home" || len(args) > 0 {
				err = usagef("jobs add: --file takes the whole job: give no command and no flag but --home and --json")
			}
		})
		return spec, err
	}
	if strings.TrimSpace(spec.Schedule) == "" {
		return spec, usagef("jobs add: --schedule is required")
	}
	p, err := o.payload(cmd, "add", args)
	if err != nil {
		return spec, err
	}
	spec.Payload, spec.Timeout, spec.Grace = *p, o.timeout, o.grace
	if changedAny(cmd, "retry-attempts", "retry-backoff", "retry-max-backoff") && spec.OnInterrupt != string(agent.InterruptRetry) && o.kind.Kind != agent.JobKindFanout {
		return spec, usagef("jobs add: --retry-* flags need --on-interrupt retry (or --kind fanout: each child's attempts)")
	}
	spec.Retry = o.retryOf()
	if spec.Paused, _ = cmd.Flags().GetBool("paused"); spec.Paused {
		spec.PausedReason = "created paused"
	}
	return spec, o.kind.Apply(cmd.Flags().Changed, &spec)
}

func (c *jobsCLI) editCmd() *cobra.Command {
	var o jobFlags
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
  chronos jobs edit backup --window daily -- /usr/local/bin/backup --full`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			patch, err := o.patch(cmd, args[1:])
			if err != nil {
				return err
			}
			rt, t, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			if patch.Notify != nil {
				if *patch.Notify, err = o.notifyChange(cmd, t); err != nil {
					return err
				}
			}
			j, _, err := rt.EditJob(cmd.Context(), args[0], patch)
			if err != nil {
				return jobError(err)
			}
			if err := o.printJob(cmd.OutOrStdout(), "edited", localapi.InfoOf(rt, &j)); err != nil {
				return err
			}
			return c.changed(cmd.Context(), o.out.Aside(cmd), t, rt, &j)
		},
	}
	o.register(cmd.Flags())
	return cmd
}

// retryOf returns the retry settings of the flags.
func (o *jobFlags) retryOf() agent.Retry {
	return agent.Retry{MaxAttempts: o.retryAttempts, Backoff: store.Duration(o.retryBackoff), MaxBackoff: store.Duration(o.retryMaxBackoff)}
}

// ifSet returns v when the flag name was given, else nil.
func ifSet[T any](cmd *cobra.Command, name string, v *T) *T {
	if cmd.Flags().Changed(name) {
		return v
	}
	return nil
}

// patch turns the flags given to jobs edit into a patch.
func (o *jobFlags) patch(cmd *cobra.Command, args []string) (agent.JobPatch, error) {
	p := agent.JobPatch{Name: ifSet(cmd, "name", &o.spec.Name), Schedule: ifSet(cmd, "schedule", &o.spec.Schedule),
		Timezone: ifSet(cmd, "tz", &o.spec.Timezone), Repeat: ifSet(cmd, "repeat", &o.spec.Repeat),
		Timeout: ifSet(cmd, "timeout", &o.timeout), Grace: ifSet(cmd, "grace", &o.grace),
		Misfire: ifSet(cmd, "misfire", &o.spec.Misfire), Overlap: ifSet(cmd, "overlap", &o.spec.Overlap),
		Window: ifSet(cmd, "window", &o.spec.Window), OnInterrupt: ifSet(cmd, "on-interrupt", &o.spec.OnInterrupt)}
	var err error
	if p.Payload, err = o.payload(cmd, "edit", args); err != nil {
		return p, err
	}
	if changedAny(cmd, "retry-attempts", "retry-backoff", "retry-max-backoff") {
		r := o.retryOf()
		p.Retry = &r
	}
	if changedAny(cmd, "notify", "notify-after", "renotify-every") {
		p.Notify = &notify.Change{} // filled in once the targets are checked
	}
	if p == (agent.JobPatch{}) {
		return p, usagef("jobs edit: nothing to change: give the flags to change or a command after \"--\"")
	}
	return p, nil
}
