package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/jobfile"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
	"github.com/chronoscron/chronos/internal/cmdline"
)

// envHome names the agent's home directory when --home is not given.
const envHome = provider.EnvHome

// armFunc arms a saved change of t's home through the agent serving it.
type armFunc func(ctx context.Context, t provider.Target, rt *agent.Runtime) (provider.ArmReport, error)

// jobsCLI is what the jobs commands share: the --home flag and how a saved
// change is armed (provider.ArmChange; tests give their own).
type jobsCLI struct {
	home string
	arm  armFunc
}

// target finds the home of the jobs and runs commands, the zone of jobs
// that name none and the agent serving the home (see provider.ResolveTarget).
func target(homeFlag string) (provider.Target, error) {
	t, err := provider.ResolveTarget(provider.TargetOptions{Home: homeFlag, Lookup: os.LookupEnv, Load: loadAgentConfig})
	return t, asUsage(err)
}

// open opens the runtime of the target home for one command.
func (c *jobsCLI) open(ctx context.Context) (*agent.Runtime, provider.Target, error) {
	t, err := target(c.home)
	if err != nil {
		return nil, t, err
	}
	rt, err := agent.Open(ctx, agent.Config{Home: t.Home, Location: t.Location, NotifyAddresses: t.Config.NotifyAddresses(), SQL: t.Config.SQLDatabases(),
		Chains: t.Config.ChainConfig()})
	return rt, t, err
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

// changed arms a saved change through the agent serving the home and says
// how; j is the changed job (nil when removed). An error means the change is
// saved but not armed.
func (c *jobsCLI) changed(ctx context.Context, w io.Writer, t provider.Target, rt *agent.Runtime, j *agent.Job) error {
	rep, err := c.arm(ctx, t, rt)
	if err == nil {
		fmt.Fprintln(w, termSafe(rep.Describe(t.Home, j)))
	}
	return err
}

func newJobsCmd() *cobra.Command { return newJobsCmdWith(provider.ArmChange) }

func newJobsCmdWith(arm armFunc) *cobra.Command {
	c := &jobsCLI{arm: arm}
	g := groupCmd("jobs", "Manage jobs in the agent's store",
		c.addCmd(), c.editCmd(), c.listCmd(), c.showCmd(), c.pauseCmd(), c.resumeCmd(), c.rmCmd(), c.runCmd())
	g.PersistentFlags().StringVar(&c.home, "home", "", "agent home directory (default $CHRONOS_HOME, else the home of $CHRONOS_AGENT_CONFIG, else ~/.chronos)")
	return g
}

// jobFlags are the flags of jobs add and jobs edit.
type jobFlags struct {
	spec                                          agent.JobSpec
	pay                                           agent.PayloadSpec
	timeout, grace, retryBackoff, retryMaxBackoff time.Duration
	retryAttempts                                 int
	out                                           cmdline.Output
	notify                                        notify.Change
	notifyAfter, renotifyEvery                    int
	kind                                          jobfile.KindFlags
}

func (o *jobFlags) register(f *pflag.FlagSet) {
	f.StringVar(&o.spec.Schedule, "schedule", "", "when to run: cron line, 'every 90s', 'in 30m', a timestamp or a phrase")
	f.StringVar(&o.spec.Timezone, "tz", "", "IANA time zone of the schedule (default the agent's timezone, else UTC)")
	f.StringVar(&o.spec.Name, "name", "", "human name of the job")
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
	f.StringArrayVar(&o.pay.Env, "env", nil, "KEY=VALUE added to a command's environment (repeatable)")
	f.StringVar(&o.pay.Dir, "dir", "", "working directory of a command")
	f.StringVar(&o.pay.HTTPURL, "http-url", "", "run an HTTP request to this URL instead of a command")
	f.StringVar(&o.pay.Method, "http-method", "", "HTTP method (default GET, or POST with a body)")
	f.StringArrayVar(&o.pay.Headers, "http-header", nil, "'Name: value' request header (repeatable)")
	f.StringVar(&o.pay.Body, "http-body", "", "HTTP request body")
	f.IntSliceVar(&o.pay.Accept, "http-accept", nil, "statuses that count as success (default any 2xx)")
	f.BoolVar(&o.pay.FollowRedirects, "http-follow-redirects", false, "follow redirects (default: a redirect is the answer)")
	f.BoolVar(&o.out.JSON, "json", false, "print the job as JSON")
	f.StringArrayVar(&o.notify.Specs, "notify", nil, "tell a target of the job's runs: KIND:DEST[@EVENT,...], KIND webhook, command or file (repeatable; 'none' removes them)")
	f.IntVar(&o.notifyAfter, "notify-after", notify.DefaultNotifyAfter, "consecutive failures that raise the failed alert")
	f.IntVar(&o.renotifyEvery, "renotify-every", 0, "remind every this many further failures of an alerted streak (0: never)")
}

// notifyChange returns the change the notify flags ask for, after checking
// the targets they name against the serving agent's address policy.
func (o *jobFlags) notifyChange(cmd *cobra.Command, t provider.Target) (notify.Change, error) {
	ch := o.notify
	ch.NotifyAfter, ch.RenotifyEvery = ifSet(cmd, "notify-after", &o.notifyAfter), ifSet(cmd, "renotify-every", &o.renotifyEvery)
	p, err := ch.Apply(notify.Policy{})
	if err == nil && len(ch.Specs) > 0 {
		err = t.Config.CheckNotify(cmd.Context(), p, net.DefaultResolver)
	}
	if err != nil {
		return ch, asUsage(fmt.Errorf("jobs %s: %w", cmd.Name(), err))
	}
	return ch, nil
}

// changedAny reports whether any of the flags was given.
func changedAny(cmd *cobra.Command, names ...string) bool {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// payload builds the payload from the command after "--" and the payload
// flags; nil when none is given (jobs edit keeps the job's).
func (o *jobFlags) payload(cmd *cobra.Command, verb string, args []string) (*runner.Payload, error) {
	dash := cmd.ArgsLenAtDash()
	if verb == "edit" && dash > 0 {
		dash-- // after the job id
	}
	switch {
	case dash > 0:
		return nil, usagef("jobs %s: unexpected argument %q before \"--\"", verb, args[0])
	case dash < 0 && len(args) > 0:
		return nil, usagef("jobs %s: put the command after \"--\" (got %q)", verb, args[0])
	case changedAny(cmd, "http-method", "http-header", "http-body", "http-accept", "http-follow-redirects") && o.pay.HTTPURL == "":
		return nil, usagef("jobs %s: --http-* flags need --http-url", verb)
	case o.pay.HTTPURL != "" && (len(o.pay.Env) > 0 || o.pay.Dir != ""):
		return nil, usagef("jobs %s: --env and --dir apply to commands, not to --http-url", verb)
	case verb == "edit" && len(args) == 0 && !changedAny(cmd, "http-url", "env", "dir"):
		return nil, nil
	}
	o.pay.Command = args
	p, err := o.pay.Payload()
	if err != nil {
		return nil, asUsage(fmt.Errorf("jobs %s: %w", verb, err))
	}
	return &p, nil
}

// reach returns the agent serving the home, or else the home's runtime (to close).
func (c *jobsCLI) reach(ctx context.Context) (*localapi.Client, *agent.Runtime, provider.Target, error) {
	t, err := target(c.home)
	if err != nil {
		return nil, nil, t, err
	}
	if cl, err := localapi.Serving(t.Home); cl != nil || err != nil {
		return cl, nil, t, err
	}
	rt, t, err := c.open(ctx)
	return nil, rt, t, err
}

// printJob prints a saved job: JSON, or how its schedule was understood and
// its next three fires.
func (o *jobFlags) printJob(w io.Writer, verb string, in localapi.JobInfo) error {
	return o.out.Print(w, in.JobView, func(w io.Writer) error { return agent.WriteSaved(w, verb, in.JobView, in.NextFires) })
}
