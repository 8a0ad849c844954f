package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/store"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
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
		Chains: t.Config.ChainConfig(), MaxJobsFile: t.Config.JobsFileLimit()})
	return rt, t, err
}

// rtFunc is one command's work on the runtime of the home.
type rtFunc func(ctx context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, t provider.Target) error

// onRuntime is a RunE that opens the runtime of the home for fn and closes
// it after.
func (c *jobsCLI) onRuntime(fn rtFunc) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		rt, t, err := c.open(cmd.Context())
		if err != nil {
			return err
		}
		defer closeRuntime(rt)
		return fn(cmd.Context(), cmd, args, rt, t)
	}
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
func (c *jobsCLI) changed(ctx context.Context, w io.Writer, t provider.Target, rt *agent.Runtime, j *job.Job) error {
	rep, err := c.arm(ctx, t, rt)
	if err == nil {
		fmt.Fprintln(w, termSafe(rep.Describe(t.Home, j)))
	}
	return err
}

func newJobsCmd() *cobra.Command { return newJobsCmdWith(provider.ArmChange) }

func newJobsCmdWith(arm armFunc) *cobra.Command {
	c := &jobsCLI{arm: arm}
	g := homeGroup(&c.home, groupCmd("jobs", "Manage jobs in the agent's store",
		c.addCmd(), c.editCmd(), c.listCmd(), c.showCmd(), c.pauseCmd(), c.resumeCmd(), c.rmCmd(), c.runCmd()))
	addCompletions(g, c)
	return g
}

// homeGroup adds to g --home, the agent home its commands act on (see
// target), and returns g.
func homeGroup(home *string, g *cobra.Command) *cobra.Command {
	g.PersistentFlags().StringVar(home, "home", "", "agent home directory (default $CHRONOS_HOME, else the home of $CHRONOS_AGENT_CONFIG, else ~/.chronos)")
	return g
}

// notifyResolver resolves webhook host names when targets are checked
// (tests replace it).
var notifyResolver notify.Resolver = net.DefaultResolver

// checkNotify checks the targets ch names against the serving agent's
// address policy and returns the policy ch makes of none. A webhook host
// name that does not resolve now is accepted with a warning on stderr.
func checkNotify(cmd *cobra.Command, t provider.Target, ch notify.Change) (notify.Policy, error) {
	p, err := ch.Apply(notify.Policy{})
	if err == nil && len(ch.Specs) > 0 {
		r := warningResolver{Resolver: notifyResolver, w: cmd.ErrOrStderr(), verb: cmd.Name()}
		err = t.Config.CheckNotify(cmd.Context(), p, r)
	}
	if err != nil {
		return p, asUsage(fmt.Errorf("jobs %s: %w", cmd.Name(), err))
	}
	return p, nil
}

// warningResolver is a Resolver that warns on w of a name that does not
// resolve: the target is kept, and checked again when a notification is
// sent.
type warningResolver struct {
	notify.Resolver
	w    io.Writer
	verb string
}

// LookupNetIP implements notify.Resolver.
func (r warningResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	addrs, err := r.Resolver.LookupNetIP(ctx, network, host)
	if err != nil {
		fmt.Fprintf(r.w, "chronos jobs %s: warning: webhook host %s does not resolve now (%v); it is checked again when a notification is sent\n",
			r.verb, termSafe(host), err)
	}
	return addrs, err
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
func printJob(w io.Writer, out cmdline.Output, verb string, in localapi.JobInfo) error {
	return out.Print(w, in.JobView, func(w io.Writer) error { return agent.WriteSaved(w, verb, in.JobView, in.NextFires) })
}
