package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/operator"
)

// operatorFlags are the connection flags and --json of the operator commands.
type operatorFlags struct {
	nasURL, token, config string
	// getenv reads the environment; nil is os.LookupEnv.
	getenv func(string) (string, bool)
	out    cmdline.Output
}

func (f *operatorFlags) register(c *cobra.Command, what string) *cobra.Command {
	c.Flags().StringVar(&f.nasURL, "nas-url", "", "base URL of NAS's internal listener (env CHRONOS_NAS_URL)")
	c.Flags().StringVar(&f.token, "operator-token", "", "the operator token (env CHRONOS_OPERATOR_TOKEN or CHRONOS_NAS_OPERATOR_TOKEN)")
	c.Flags().StringVar(&f.config, "config", "", "NAS's config file: the URL and token default to its relay.nas_url and operator_token")
	return f.out.Register(c, what)
}

// client finds NAS: the flags, then NAS's config file, then the environment.
func (f *operatorFlags) client() (*operator.Client, error) {
	getenv := f.getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	c, err := operator.Resolve(operator.Source{URL: f.nasURL, Token: f.token, ConfigFile: f.config, Getenv: getenv,
		LoadConfig: func(path string) (nas.Config, error) { return nas.LoadConfig(path, getenv) }})
	return c, asUsage(err)
}

// operatorRun is the RunE of an operator command named name: it finds NAS,
// calls it and prints the answer (text under no --json). An answer NAS
// refuses as invalid is a usage error.
func operatorRun[T any](f *operatorFlags, name string, call func(context.Context, *operator.Client, []string) (T, error),
	text func(T) func(io.Writer) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		oc, err := f.client()
		if err != nil {
			return err
		}
		resp, err := call(cmd.Context(), oc, args)
		if ce := (*contract.Error)(nil); errors.As(err, &ce) && ce.Code == contract.CodeInvalidRequest {
			return asUsage(fmt.Errorf("%s: %w", name, err))
		} else if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return f.out.Print(cmd.OutOrStdout(), resp, text(resp))
	}
}

func newDLQCmd() *cobra.Command {
	return groupCmd("dlq", "Inspect and replay the dead letter", newDLQListCmd(), newDLQReplayCmd())
}

func newDLQListCmd() *cobra.Command {
	var f operatorFlags
	var agent string
	c := f.register(&cobra.Command{
		Use: "list [--agent A] [--json]", Short: "List dead-lettered fires, newest first", Args: cobra.NoArgs,
		Example: "  chronos dlq list --config /etc/chronos/nas.yaml\n  chronos dlq list --agent billing --json | jq -r '.[].schedule_id'",
		RunE: operatorRun(&f, "dlq list", func(ctx context.Context, oc *operator.Client, _ []string) ([]contract.DeadLetter, error) {
			return oc.DeadLetters(ctx, agent)
		}, func(all []contract.DeadLetter) func(io.Writer) error {
			return func(w io.Writer) error { return operator.WriteDeadLetters(w, all) }
		}),
	}, "the entries")
	c.Flags().StringVar(&agent, "agent", "", "only this agent's entries")
	return c
}

func newDLQReplayCmd() *cobra.Command {
	var f operatorFlags
	var agent string
	c := f.register(&cobra.Command{
		Use: "replay [--agent A | SCHEDULE_ID...]", Short: "Deliver dead-lettered fires again (due now, attempts reset)",
		Long: `Deliver dead-lettered fires again: each is re-armed due now, with its
attempts reset, and leaves the dead letter. An entry whose job was armed
again after its fire died (its agent moved on to a later slot) is not
re-armed, since that would replace the newer fire: it leaves the dead letter
and is listed as dropped with the reason. Every entry is printed with what
happened to it. A schedule id that names no dead letter, or an agent NAS
knows nothing of, is an error and nothing is replayed. NAS is found as
chronos dlq list finds it.`,
		Example: "  chronos dlq replay sch_01J...\n  chronos dlq replay --agent billing --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case agent != "" && len(args) > 0:
				return usagef("dlq replay: give --agent or schedule ids, not both")
			case agent == "" && len(args) == 0:
				return usagef("dlq replay: give --agent A or at least one schedule id")
			}
			return operatorRun(&f, "dlq replay", func(ctx context.Context, oc *operator.Client, args []string) (contract.DLQReplayResponse, error) {
				return oc.Replay(ctx, contract.DLQReplayRequest{AgentID: agent, ScheduleIDs: args})
			}, func(r contract.DLQReplayResponse) func(io.Writer) error {
				return func(w io.Writer) error { return operator.WriteReplay(w, r) }
			})(cmd, args)
		},
	}, "what was done with each entry")
	c.Flags().StringVar(&agent, "agent", "", "replay all of this agent's dead letters")
	return c
}

func newNASUnarmedCmd() *cobra.Command {
	var f operatorFlags
	var agent string
	c := f.register(&cobra.Command{
		Use:   "unarmed [--config nas.yaml] [--agent A] [--json]",
		Short: "List jobs left without an armed fire after their last fire",
		Long: `List the jobs NAS holds no armed fire for although their last fire was
delivered, dropped (the operator stopped the instance) or dead-lettered at
least unarmed_after ago, and that their agent neither armed again nor
cancelled since: typically an agent that stopped before it armed its next
slot. Oldest first. --config takes NAS's internal URL and operator token
from NAS's config file, as chronos dlq does.`,
		Args: cobra.NoArgs,
		RunE: operatorRun(&f, "nas unarmed", func(ctx context.Context, oc *operator.Client, _ []string) (contract.UnarmedResponse, error) {
			resp, err := oc.Unarmed(ctx, agent)
			if resp.Unarmed == nil {
				resp.Unarmed = []contract.UnarmedJob{}
			}
			return resp, err
		}, func(r contract.UnarmedResponse) func(io.Writer) error {
			return func(w io.Writer) error { return operator.WriteUnarmed(w, r, time.Now()) }
		}),
	}, "the answer")
	c.Flags().StringVar(&agent, "agent", "", "only this agent's jobs")
	return c
}

func newInstanceCmd() *cobra.Command {
	return groupCmd("instance", "Stop and start an agent instance at NAS",
		newInstanceStateCmd("stop", "Stop an agent instance: NAS drops its fires (not retried) until it is started",
			(*operator.Client).StopInstance),
		newInstanceStateCmd("start", "Start a stopped agent instance: its fires are delivered again and its agent reconciles",
			(*operator.Client).StartInstance))
}

func newInstanceStateCmd(verb, short string, call func(*operator.Client, context.Context, string) (contract.InstanceStateResponse, error)) *cobra.Command {
	var f operatorFlags
	return f.register(&cobra.Command{
		Use: verb + " INSTANCE_ID", Short: short, Args: cobra.ExactArgs(1),
		Long: short + `. It is idempotent. INSTANCE_ID is the instance_id the
agent arms with; NAS is found as chronos dlq finds it (--nas-url and
--operator-token, else --config nas.yaml, else the environment).`,
		Example: "  chronos instance " + verb + " inst_42 --config /etc/chronos/nas.yaml\n  chronos instance " + verb + " inst_42 --json",
		RunE: operatorRun(&f, "instance "+verb, func(ctx context.Context, oc *operator.Client, args []string) (contract.InstanceStateResponse, error) {
			return call(oc, ctx, args[0])
		}, func(r contract.InstanceStateResponse) func(io.Writer) error {
			return cmdline.Textf("%s", operator.InstanceLine(r))
		}),
	}, "the instance's state")
}

func newAgentStateCmd(verb, short string, call func(*operator.Client, context.Context, string) (contract.AgentStateResponse, error)) *cobra.Command {
	var f operatorFlags
	return f.register(&cobra.Command{
		Use: verb + " AGENT_ID", Short: short, Args: cobra.ExactArgs(1),
		Long: short + `. It is idempotent and reaches every NAS process sharing the
store within 2 seconds. While an agent is disabled NAS keeps its armed fires
(none is delivered, none is lost) and answers its calls 403 invalid_client;
once it is enabled they go out, and those more than relay.misfire_grace late
are dead-lettered (the agent sees them as failed fires). An agent the agents
file disables (disabled: true) is enabled only by removing that line. NAS is
found as chronos dlq finds it (--nas-url and --operator-token, else --config
nas.yaml, else the environment).`,
		Example: "  chronos agent " + verb + " billing --config /etc/chronos/nas.yaml\n  chronos agent " + verb + " billing --json",
		RunE: operatorRun(&f, "agent "+verb, func(ctx context.Context, oc *operator.Client, args []string) (contract.AgentStateResponse, error) {
			return call(oc, ctx, args[0])
		}, func(r contract.AgentStateResponse) func(io.Writer) error {
			return cmdline.Textf("%s", operator.AgentLine(r))
		}),
	}, "the agent's state")
}

func newAgentRekeyCmd() *cobra.Command {
	var f operatorFlags
	return f.register(&cobra.Command{
		Use: "rekey AGENT_ID", Short: "Retire the cron keys of an agent's direct jobs: each gets a new key", Args: cobra.ExactArgs(1),
		Long: `Retire every cron key of the agent's direct-delivery jobs at NAS (direct
delivery: docs/operations.md). NAS records the moment in the store, so every
NAS process mints a new key at the next provision of each job, and asks the
agent's instances to reconcile now, which provisions them. A fire already
armed under an old key keeps it until its job is provisioned again: no fire
is lost. Keys also expire on their own after relay.cron_key_max_age. An agent
NAS knows nothing of is an error. NAS is found as chronos dlq finds it
(--nas-url and --operator-token, else --config nas.yaml, else the
environment).`,
		Example: "  chronos agent rekey billing --config /etc/chronos/nas.yaml\n  chronos agent rekey billing --json",
		RunE: operatorRun(&f, "agent rekey", func(ctx context.Context, oc *operator.Client, args []string) (contract.AgentRekeyResponse, error) {
			return oc.RekeyAgent(ctx, args[0])
		}, func(r contract.AgentRekeyResponse) func(io.Writer) error {
			return cmdline.Textf("%s", operator.RekeyLine(r))
		}),
	}, "the re-key")
}

func newAgentCancelAllCmd() *cobra.Command {
	var f operatorFlags
	return f.register(&cobra.Command{
		Use: "cancel-all AGENT_ID", Short: "Cancel every armed fire of an agent at NAS", Args: cobra.ExactArgs(1),
		Long: `Cancel every armed fire NAS holds for the agent and print how many. Its jobs
stay in the agent's store: the agent arms them again at its next reconcile
(start, a change, or its resync). NAS is found as chronos dlq finds it.`,
		Example: "  chronos agent cancel-all billing --config /etc/chronos/nas.yaml --json",
		RunE: operatorRun(&f, "agent cancel-all", func(ctx context.Context, oc *operator.Client, args []string) (contract.CancelAllResponse, error) {
			return oc.CancelAll(ctx, args[0])
		}, func(r contract.CancelAllResponse) func(io.Writer) error {
			return cmdline.Textf("cancelled %d armed fires of agent %s", r.Cancelled, termSafe(r.AgentID))
		}),
	}, "the count cancelled")
}
