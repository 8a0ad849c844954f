package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// afterJobChange, when set, is called after jobs add, pause, resume and rm
// have saved a change, with the home directory they changed; a provider uses
// it to arm the change at once. Its error is reported (exit 1) but the change
// stays saved.
var afterJobChange func(ctx context.Context, home string) error

// envHome names the agent's home directory when --home is not given.
const envHome = "CHRONOS_HOME"

// resolveHome returns the home directory of the jobs and runs commands; see
// resolveTarget.
func resolveHome(flag string) (string, error) {
	home, _, err := resolveTarget(flag, os.LookupEnv)
	return home, err
}

// resolveTarget returns the home directory and the default zone of the jobs
// and runs commands. The home is --home, else $CHRONOS_HOME, else the home of
// the agent config named by $CHRONOS_AGENT_CONFIG, else ~/.chronos. The zone
// of jobs that name none is the agent's configured zone (its config's
// timezone, or $CHRONOS_TIMEZONE), else UTC; a config for another home than
// --home names its own agent's zone, not this one's, and is not used.
func resolveTarget(flag string, lookup func(string) (string, bool)) (string, *time.Location, error) {
	lk := lookup
	if flag != "" {
		agentCfg, _, err := loadAgentConfig("", lookup)
		if err != nil {
			return "", nil, err
		}
		if !sameDir(flag, agentCfg.Home) {
			lk = hideEnv(lk, envAgentConfig)
		}
		lk = withEnv(lk, envHome, flag)
	}
	cfg, _, err := loadAgentConfig("", lk)
	if err != nil {
		return "", nil, err
	}
	loc, err := cfg.Location()
	if err != nil {
		return "", nil, asUsage(err)
	}
	return cfg.Home, loc, nil
}

// hideEnv returns lookup without the variable name.
func hideEnv(lookup func(string) (string, bool), name string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == name {
			return "", false
		}
		return lookup(k)
	}
}

// withEnv returns lookup with the variable name set to value.
func withEnv(lookup func(string) (string, bool), name, value string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == name {
			return value, true
		}
		return lookup(k)
	}
}

// openRuntime opens the agent runtime of home for one CLI command, with the
// agent's default zone for jobs that name none.
func openRuntime(ctx context.Context, homeFlag string) (*agent.Runtime, string, error) {
	home, loc, err := resolveTarget(homeFlag, os.LookupEnv)
	if err != nil {
		return nil, "", err
	}
	rt, err := agent.Open(ctx, agent.Config{Home: home, Location: loc})
	if err != nil {
		return nil, "", err
	}
	return rt, home, nil
}

func closeRuntime(rt *agent.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = rt.Close(ctx)
}

// jobError turns the agent's input errors into usage errors (exit 2).
func jobError(err error) error {
	if errors.Is(err, agent.ErrInvalidJob) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) {
		return asUsage(err)
	}
	return err
}

// changed runs the afterJobChange hook.
func changed(ctx context.Context, home string) error {
	if afterJobChange == nil {
		return nil
	}
	return afterJobChange(ctx, home)
}

func newJobsCmd() *cobra.Command {
	var home string
	c := groupCmd("jobs", "Manage jobs in the agent's store",
		newJobsAddCmd(&home),
		newJobsListCmd(&home),
		newJobsShowCmd(&home),
		newJobsPauseCmd(&home),
		newJobsResumeCmd(&home),
		newJobsRmCmd(&home),
		newJobsRunCmd(&home),
	)
	c.PersistentFlags().StringVar(&home, "home", "", "agent home directory (default $CHRONOS_HOME, else the home of $CHRONOS_AGENT_CONFIG, else ~/.chronos)")
	return c
}

// addOptions are the flags of jobs add.
type addOptions struct {
	spec            agent.JobSpec
	timeout, grace  time.Duration
	retryAttempts   int
	retryBackoff    time.Duration
	retryMaxBackoff time.Duration
	env             []string
	dir             string
	httpURL         string
	httpMethod      string
	httpHeaders     []string
	httpBody        string
	httpAccept      []int
	httpRedirects   bool
	paused          bool
	json            bool
}

func newJobsAddCmd(home *string) *cobra.Command {
	var o addOptions
	c := &cobra.Command{
		Use:   "add --schedule S [flags] (-- COMMAND [ARGS...] | --http-url URL)",
		Short: "Add a job and show how its schedule was understood",
		Long: `Add a job to the store and print its id, how the schedule was understood and its next
three fires.

The payload is either a command after "--" (one argument runs with "sh -c", several run
directly) or an HTTP request (--http-url and the other --http-* flags).`,
		Example: `  chronos jobs add --schedule 'every 2s' -- 'date >> /tmp/ticks'
  chronos jobs add --schedule 'weekdays at 9am' --tz Europe/Paris --window daily -- /usr/local/bin/brief
  chronos jobs add --schedule '*/5 * * * *' --http-url https://example.org/hook --http-method POST`,
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := o.build(cmd, args)
			if err != nil {
				return err
			}
			rt, h, err := openRuntime(cmd.Context(), *home)
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			j, sched, err := rt.AddJob(cmd.Context(), spec)
			if err != nil {
				return jobError(err)
			}
			out := cmd.OutOrStdout()
			if o.json {
				if err := jobsJSON(out, jobView(rt, &j)); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "added job %s\n", termSafe(j.ID))
				fmt.Fprintf(out, "schedule: %s\n", termSafe(sched.Describe()))
				if j.NextRunAt == nil {
					fmt.Fprintln(out, "paused: no fires until resumed")
				} else {
					fmt.Fprintln(out, "next fires:")
					at := *j.NextRunAt
					for i := 0; i < 3; i++ {
						fmt.Fprintf(out, "  %s\n", at.In(sched.Location()).Format(time.RFC3339))
						next, ok := sched.Next(at)
						if !ok {
							break
						}
						at = next
					}
				}
			}
			return changed(cmd.Context(), h)
		},
	}
	f := c.Flags()
	f.StringVar(&o.spec.Schedule, "schedule", "", "when to run: cron line, 'every 90s', 'in 30m', a timestamp or a phrase (required)")
	f.StringVar(&o.spec.Timezone, "tz", "", "IANA time zone of the schedule (default the agent's timezone, else UTC)")
	f.StringVar(&o.spec.Name, "name", "", "human name of the job")
	f.StringVar(&o.spec.ID, "id", "", "job id (default generated): letters, digits, . _ -")
	f.IntVar(&o.spec.Repeat, "repeat", 0, "stop after this many runs (0: no limit)")
	f.StringVar(&o.spec.Misfire, "misfire", "", "overdue slots: run_once (default), skip, run_all")
	f.DurationVar(&o.grace, "grace", 0, "how late a slot may run before it counts as missed (default half the period, within 2m..2h)")
	f.StringVar(&o.spec.Overlap, "overlap", "", "a slot while a run is live: skip (default), queue_one, allow, replace")
	f.StringVar(&o.spec.Window, "window", "", "idempotency window: none (default), hourly, daily, weekly")
	f.StringVar(&o.spec.OnInterrupt, "on-interrupt", "", "the owner died mid-run: record (default), retry")
	f.DurationVar(&o.timeout, "timeout", 0, "stop a run after this long (0: no limit)")
	f.IntVar(&o.retryAttempts, "retry-attempts", 0, "under --on-interrupt retry: attempts in all (default 3)")
	f.DurationVar(&o.retryBackoff, "retry-backoff", 0, "under --on-interrupt retry: first wait, doubling (default 10s)")
	f.DurationVar(&o.retryMaxBackoff, "retry-max-backoff", 0, "under --on-interrupt retry: longest wait (default 5m)")
	f.StringArrayVar(&o.env, "env", nil, "KEY=VALUE added to a command's environment (repeatable)")
	f.StringVar(&o.dir, "dir", "", "working directory of a command")
	f.StringVar(&o.httpURL, "http-url", "", "run an HTTP request to this URL instead of a command")
	f.StringVar(&o.httpMethod, "http-method", "", "HTTP method (default GET, or POST with a body)")
	f.StringArrayVar(&o.httpHeaders, "http-header", nil, "'Name: value' request header (repeatable)")
	f.StringVar(&o.httpBody, "http-body", "", "HTTP request body")
	f.IntSliceVar(&o.httpAccept, "http-accept", nil, "statuses that count as success (default any 2xx)")
	f.BoolVar(&o.httpRedirects, "http-follow-redirects", false, "follow redirects (default: a redirect is the answer)")
	f.BoolVar(&o.paused, "paused", false, "create the job paused")
	f.BoolVar(&o.json, "json", false, "print the job as JSON")
	return c
}

// build turns flags and the command after "--" into a job spec.
func (o *addOptions) build(cmd *cobra.Command, args []string) (agent.JobSpec, error) {
	spec := o.spec
	if strings.TrimSpace(spec.Schedule) == "" {
		return spec, usagef("jobs add: --schedule is required")
	}
	dash := cmd.ArgsLenAtDash()
	if dash > 0 {
		return spec, usagef("jobs add: unexpected argument %q before \"--\"", args[0])
	}
	if dash < 0 && len(args) > 0 {
		return spec, usagef("jobs add: put the command after \"--\" (got %q)", args[0])
	}
	httpSet := cmd.Flags().Changed("http-method") || cmd.Flags().Changed("http-header") ||
		cmd.Flags().Changed("http-body") || cmd.Flags().Changed("http-accept") || cmd.Flags().Changed("http-follow-redirects")
	switch {
	case len(args) > 0 && o.httpURL != "":
		return spec, usagef("jobs add: give either a command after \"--\" or --http-url, not both")
	case len(args) == 0 && o.httpURL == "":
		return spec, usagef("jobs add: give a command after \"--\" or --http-url")
	case httpSet && o.httpURL == "":
		return spec, usagef("jobs add: --http-* flags need --http-url")
	case o.httpURL != "" && (len(o.env) > 0 || o.dir != ""):
		return spec, usagef("jobs add: --env and --dir apply to commands, not to --http-url")
	}
	if o.httpURL != "" {
		h := &runner.HTTP{URL: o.httpURL, Method: o.httpMethod, Body: o.httpBody, Accept: o.httpAccept, FollowRedirects: o.httpRedirects}
		for _, hv := range o.httpHeaders {
			name, value, ok := strings.Cut(hv, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return spec, usagef("jobs add: --http-header %q is not 'Name: value'", hv)
			}
			if h.Headers == nil {
				h.Headers = map[string]string{}
			}
			h.Headers[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
		spec.Payload = runner.Payload{Kind: runner.KindHTTP, HTTP: h}
	} else {
		sh := &runner.Shell{Dir: o.dir}
		if len(args) == 1 {
			sh.Command = args[0]
		} else {
			sh.Argv = args
		}
		for _, kv := range o.env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return spec, usagef("jobs add: --env %q is not KEY=VALUE", kv)
			}
			if sh.Env == nil {
				sh.Env = map[string]string{}
			}
			sh.Env[k] = v
		}
		spec.Payload = runner.Payload{Kind: runner.KindShell, Shell: sh}
	}
	spec.Timeout, spec.Grace = o.timeout, o.grace
	spec.Retry = agent.Retry{MaxAttempts: o.retryAttempts, Backoff: store.Duration(o.retryBackoff), MaxBackoff: store.Duration(o.retryMaxBackoff)}
	retrySet := cmd.Flags().Changed("retry-attempts") || cmd.Flags().Changed("retry-backoff") || cmd.Flags().Changed("retry-max-backoff")
	if retrySet && spec.OnInterrupt != string(agent.InterruptRetry) {
		return spec, usagef("jobs add: --retry-* flags need --on-interrupt retry")
	}
	spec.Paused = o.paused
	if o.paused {
		spec.PausedReason = "created paused"
	}
	return spec, nil
}

func newJobsListCmd(home *string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List jobs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, _, err := openRuntime(cmd.Context(), *home)
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			jobs, err := rt.Jobs(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				views := make([]jobJSON, 0, len(jobs))
				for i := range jobs {
					views = append(views, jobView(rt, &jobs[i]))
				}
				return jobsJSON(cmd.OutOrStdout(), views)
			}
			return writeJobTable(cmd.OutOrStdout(), jobs)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newJobsShowCmd(home *string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show ID",
		Short: "Show one job",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, _, err := openRuntime(cmd.Context(), *home)
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			j, err := rt.Job(cmd.Context(), args[0])
			if err != nil {
				return jobError(err)
			}
			if asJSON {
				return jobsJSON(cmd.OutOrStdout(), jobView(rt, &j))
			}
			return writeJobDetail(cmd.OutOrStdout(), rt, &j)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newJobsPauseCmd(home *string) *cobra.Command {
	var reason string
	c := &cobra.Command{
		Use:   "pause ID",
		Short: "Pause a job: no fires until resumed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, h, err := openRuntime(cmd.Context(), *home)
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			if _, err := rt.Pause(cmd.Context(), args[0], reason); err != nil {
				return jobError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "paused job %s\n", termSafe(args[0]))
			return changed(cmd.Context(), h)
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the job is paused (shown by list and show)")
	return c
}

func newJobsResumeCmd(home *string) *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a paused job from its next slot after now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, h, err := openRuntime(cmd.Context(), *home)
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			j, err := rt.Resume(cmd.Context(), args[0])
			if err != nil {
				return jobError(err)
			}
			next := "none (finished)"
			if j.NextRunAt != nil {
				next = jobTime(&j, j.NextRunAt)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resumed job %s; next fire %s\n", termSafe(j.ID), next)
			return changed(cmd.Context(), h)
		},
	}
}

func newJobsRmCmd(home *string) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID",
		Short: "Remove a job (its ledger history stays)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, h, err := openRuntime(cmd.Context(), *home)
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			if err := rt.Remove(cmd.Context(), args[0]); err != nil {
				return jobError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed job %s\n", termSafe(args[0]))
			return changed(cmd.Context(), h)
		},
	}
}

func newJobsRunCmd(home *string) *cobra.Command {
	var force, asJSON bool
	c := &cobra.Command{
		Use:   "run ID",
		Short: "Run a job now through the same claim and ledger, and wait for the outcome",
		Long: `Run a job now. The run goes through the job's claim and policies like a scheduled
fire, is recorded in the ledger with trigger "manual", and this command waits for it to
end. --force runs even if the idempotency window already has a successful run.
Exit status: 0 succeeded; 1 failed, interrupted or skipped (the reason is printed).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			rt, _, err := openRuntime(ctx, *home)
			if err != nil {
				return err
			}
			defer closeRuntime(rt)
			started := time.Now()
			res, err := rt.RunNow(ctx, args[0], force)
			if err != nil {
				return err
			}
			switch res.Status {
			case agent.FireGone:
				return usagef("jobs run: %s", res.Reason)
			case agent.FireBusy:
				return fmt.Errorf("jobs run: cannot run now: %s (try again in %s)", res.Reason, res.RetryAfter)
			}
			run, err := rt.Wait(ctx, res.RunID, started)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := jobsJSON(out, run); err != nil {
					return err
				}
			} else {
				line := fmt.Sprintf("run %s of job %s %s", run.RunID, run.JobID, run.State)
				if run.State == "succeeded" || run.State == "failed" {
					line += fmt.Sprintf(" after %s", run.LastAt.Sub(run.FirstAt).Round(time.Millisecond))
				}
				if run.Reason != "" {
					line += ": " + run.Reason
				}
				fmt.Fprintln(out, termSafe(line))
				if run.Output != "" {
					fmt.Fprintf(out, "output: %s\n", termSafe(filepath.Join(rt.Store().Home(), run.Output)))
				}
			}
			if run.State != "succeeded" {
				return fmt.Errorf("jobs run: run %s %s", run.RunID, run.State)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&force, "force", false, "run even if the idempotency window already has a successful run")
	c.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	return c
}

// jobsCount formats n, or "-" for zero.
func jobsCount(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}
