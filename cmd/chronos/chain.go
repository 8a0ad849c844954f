package main

import (
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

// chainCLI holds the flags of the chain commands.
type chainCLI struct {
	jobsCLI
	id, in, at, reason string
	start              agent.ChainStart
	spawn              agent.ChainSpawn
	close              agent.ChainClose
	maxRetries         int
	timeout            time.Duration
	out                cmdline.Output
}

// run opens the runtime of the home for fn, one chain command's work.
func (c *chainCLI) run(fn rtFunc) func(*cobra.Command, []string) error {
	return c.onRuntime(func(ctx context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, t provider.Target) error {
		err := fn(ctx, cmd, args, rt, t)
		if errors.Is(err, agent.ErrInvalidJob) || errors.Is(err, chain.ErrNotFound) {
			return asUsage(err)
		}
		return cmdline.WithCode(chain.ExitCode(err), err)
	})
}

// step reads the step's time and command (after "--") into s.
func (c *chainCLI) step(cmd *cobra.Command, args []string, s *agent.StepSpec) (err error) {
	if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
		return usagef("put the step's command after \"--\"")
	}
	*s, err = agent.StepAt(c.in, c.at, args, c.timeout)
	return err
}

// stepDone prints the chain and the step it added, then arms the change as
// jobs add does.
func (c *chainCLI) stepDone(ctx context.Context, cmd *cobra.Command, rt *agent.Runtime, t provider.Target) func(agent.ChainStep, error) error {
	return func(s agent.ChainStep, err error) error {
		text := cmdline.Textf("chain %s: step %s at %s", termSafe(s.Chain.ID), termSafe(s.Job.ID), agent.JobTime(&s.Job, s.Job.NextRunAt))
		if err := c.show(cmd.OutOrStdout(), s, err, text); err != nil {
			return err
		}
		return c.changed(ctx, c.out.Aside(cmd), t, rt, &s.Job)
	}
}

func (c *chainCLI) doStart(ctx context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, t provider.Target) error {
	if err := c.step(cmd, args, &c.start.Step); err != nil {
		return err
	}
	if cmd.Flags().Changed("max-retries") {
		c.start.Limits.MaxRetries = &c.maxRetries
	}
	return c.stepDone(ctx, cmd, rt, t)(rt.StartChain(ctx, c.start))
}

func (c *chainCLI) doSpawn(ctx context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, t provider.Target) error {
	if err := c.step(cmd, args, &c.spawn.Step); err != nil {
		return err
	}
	c.spawn.ChainID, c.spawn.SpawnedBy = cmp.Or(c.id, os.Getenv(agent.EnvChainID)), os.Getenv(agent.EnvChainStep)
	return c.stepDone(ctx, cmd, rt, t)(rt.SpawnStep(ctx, c.spawn))
}

func (c *chainCLI) doClose(ctx context.Context, cmd *cobra.Command, _ []string, rt *agent.Runtime, t provider.Target) error {
	c.close.ChainID, c.close.Reason = cmp.Or(c.id, os.Getenv(agent.EnvChainID)), c.reason
	ch, err := rt.CloseChain(ctx, c.close)
	if err == nil {
		err = c.changed(ctx, io.Discard, t, rt, nil)
	}
	return c.show(cmd.OutOrStdout(), ch, err, func(w io.Writer) error { return chain.WriteList(w, []chain.Chain{ch}) })
}

func newChainCmd() *cobra.Command {
	c := &chainCLI{jobsCLI: jobsCLI{arm: provider.ArmChange}}
	start := &cobra.Command{Use: "start --class C [--id ID] --stage S --in D [limits] -- CMD...", Short: "Start a chain and arm its first step", RunE: c.run(c.doStart)}
	f := start.Flags()
	f.StringVar(&c.start.Class, "class", "", "the chain's class (its limits and breaker)")
	f.StringVar(&c.start.ID, "id", "", "the chain id, stable per incident (default {class}-{YYYYMMDD}-{slot})")
	f.StringVar(&c.start.Stage, "stage", "", "the first step's stage (action...)")
	f.IntVar(&c.start.Limits.MaxDepth, "max-depth", 0, "this chain's max_depth (default the class's)")
	f.IntVar(&c.start.Limits.MaxChildren, "max-children", 0, "this chain's max_children (default the class's)")
	f.IntVar(&c.maxRetries, "max-retries", 0, "this chain's max_retries per stage (default the class's)")
	f.DurationVar(&c.start.Limits.Lifetime, "lifetime", 0, "this chain's lifetime (default the class's)")
	f.TimeVar(&c.start.Limits.ExpiresAt, "expires-at", time.Time{}, []string{time.RFC3339}, "expire at this RFC 3339 time instead of after the lifetime")
	spawn := &cobra.Command{Use: "spawn [--chain ID] --stage S --in D [--retry] -- CMD...", Short: "Add a step to a chain (from a step's run)", RunE: c.run(c.doSpawn)}
	spawn.Flags().StringVar(&c.spawn.Stage, "stage", "", "the new step's stage (verify, monitor...; with --retry default the spawning step's)")
	spawn.Flags().BoolVar(&c.spawn.Retry, "retry", false, "the next attempt of the stage, at its depth")
	closeCmd := &cobra.Command{Use: "close [--chain ID] [--cooling-down D] [--failed] --reason TEXT", Short: "Close a chain (or taper, then close)", Args: cobra.NoArgs, RunE: c.run(c.doClose)}
	closeCmd.Flags().DurationVar(&c.close.CoolingDown, "cooling-down", 0, "taper: stay open this long (monitor spawns allowed), then close")
	closeCmd.Flags().BoolVar(&c.close.Failed, "failed", false, "close with outcome failure (counts toward the class's breaker)")
	closeCmd.Flags().StringVar(&c.reason, "reason", "", "why the chain closes")
	for _, cmd := range []*cobra.Command{start, spawn} {
		cmd.Flags().StringVar(&c.in, "in", "", "run the step after this long (3m)")
		cmd.Flags().StringVar(&c.at, "at", "", "run the step at this time (RFC 3339)")
		cmd.Flags().DurationVar(&c.timeout, "timeout", 0, "stop the step's run after this long")
	}
	for _, cmd := range []*cobra.Command{spawn, closeCmd} {
		cmd.Flags().StringVar(&c.id, "chain", "", "the chain id (default $CHRONOS_CHAIN_ID)")
	}
	start.Example = "  chronos chain start --class disk --id disk-sda-20261124 --stage action --in 3m -- /usr/local/bin/free-space"
	spawn.Example = "  chronos chain spawn --stage verify --in 2m -- /usr/local/bin/check-space\n  chronos chain spawn --retry --in 5m -- /usr/local/bin/check-space"
	closeCmd.Example = "  chronos chain close --reason 'space back above 20%'\n  chronos chain close --cooling-down 15m --reason 'fixed; watching'"
	c.out.Register(start, "the chain and its first step")
	c.out.Register(spawn, "the chain and the new step")
	c.out.Register(closeCmd, "the chain")
	g := groupCmd("chain", "Start, spawn into and close chains of one-shot steps; manage class breakers", start, spawn, closeCmd, c.breakerCmd())
	g.Long = "Chains are self-limiting runs of one-shot steps a scout starts for one incident.\n\n" + chain.ExitHelp
	return homeGroup(&c.home, g)
}

func (c *chainCLI) breakerCmd() *cobra.Command {
	list := &cobra.Command{Use: "list", Short: "List the class breakers", Args: cobra.NoArgs,
		RunE: c.run(func(ctx context.Context, cmd *cobra.Command, _ []string, rt *agent.Runtime, _ provider.Target) error {
			bs, err := rt.Breakers(ctx)
			return c.show(cmd.OutOrStdout(), bs, err, func(w io.Writer) error { return chain.WriteBreakers(w, bs) })
		})}
	reset := &cobra.Command{Use: "reset CLASS", Short: "Close a class's breaker by hand", Args: cobra.ExactArgs(1),
		RunE: c.run(func(ctx context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, _ provider.Target) error {
			b, err := rt.ResetBreaker(ctx, args[0])
			return c.show(cmd.OutOrStdout(), b, err, func(w io.Writer) error { return chain.WriteBreakers(w, []chain.Breaker{b}) })
		})}
	list.Example, reset.Example = "  chronos chain breaker list --json", "  chronos chain breaker reset disk"
	c.out.Register(list, "the breakers")
	c.out.Register(reset, "the breaker")
	return groupCmd("breaker", "List and reset the chain classes' circuit breakers", list, reset)
}

// show prints v as JSON with --json, else with text.
func (c *chainCLI) show(w io.Writer, v any, err error, text func(io.Writer) error) error {
	if err != nil {
		return err
	}
	return c.out.Print(w, v, text)
}

func newChainsCmd() *cobra.Command {
	c := &chainCLI{jobsCLI: jobsCLI{arm: provider.ArmChange}}
	var f agent.ChainFilter
	list := &cobra.Command{Use: "list [--class C] [--state S]", Short: "List chains", Args: cobra.NoArgs,
		RunE: c.run(func(ctx context.Context, cmd *cobra.Command, _ []string, rt *agent.Runtime, _ provider.Target) error {
			cs, err := rt.Chains(ctx, f)
			return c.show(cmd.OutOrStdout(), cs, err, func(w io.Writer) error { return chain.WriteList(w, cs) })
		})}
	list.Flags().StringVar(&f.Class, "class", "", "only chains of this class")
	list.Flags().StringVar((*string)(&f.State), "state", "", "only chains in this state (idle, armed, active, cooling_down, closed)")
	show := &cobra.Command{Use: "show ID", Short: "Show a chain's story: transitions and steps as a tree with their runs", Args: cobra.ExactArgs(1),
		RunE: c.run(func(ctx context.Context, cmd *cobra.Command, args []string, rt *agent.Runtime, _ provider.Target) error {
			ch, err := rt.Chain(ctx, args[0])
			return c.show(cmd.OutOrStdout(), ch, err, func(w io.Writer) error { return chain.WriteStory(w, ch) })
		})}
	list.Example, show.Example = "  chronos chains list --state active\n  chronos chains list --class disk --json", "  chronos chains show disk-sda-20261124"
	c.out.Register(list, "the chains")
	c.out.Register(show, "the chain")
	return homeGroup(&c.home, groupCmd("chains", "List and show chains", list, show))
}
