package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
	"github.com/chronoscron/chronos/cmd/chronos/internal/relaybench"
	"github.com/chronoscron/chronos/nas"
)

func newBenchCmd() *cobra.Command {
	return groupCmd("bench", "Measure Chronos on this machine", newBenchRelayCmd())
}

// benchRelayFlags are the command line of `chronos bench relay`.
type benchRelayFlags struct {
	o                                       relaybench.Options
	at, rate, profile, memProfile, delivery string
	asJSON                                  bool
}

func newBenchRelayCmd() *cobra.Command {
	var b benchRelayFlags
	c := &cobra.Command{
		Use:   "relay",
		Short: "Arm one-shots, deliver them through a real NAS, and measure",
		Long: `Arm one-shots in a store and deliver them end to end: the dispatchers of an
in-process NAS claim them and hand each to NAS in process (as in chronos nas),
which mints a real cron_fire token and calls a built-in agent sink on
loopback that verifies every token against NAS's JWKS and the body hash.

Either --n fires due at the same instant (--at after the start), or --rate
fires per second for --duration starting --at after the start. It prints the
arm rate, the drain rate, the lag after fire_at (p50, p99, max), the store's
bytes per armed one-shot (Redis's memory, or PostgreSQL's tables and indexes
on disk), CPU per fire of this process (and of Redis, or of a PostgreSQL on
this machine), and the verified and failed counts. It exits 1 if any fire is lost or any
token fails verification.

--store is memory, a redis:// URL (the run's keys go under a fresh prefix)
or a postgres:// URL (the run's tables go in a fresh schema, made by the
engine's migrations whatever the URL's schema= says, and pool_max_conns
sizes each process's pool); what the run wrote is removed after.

--slow and --waking add neighbours to a burst: fires of one agent that
answers after --slow-answer, and of one that answers 503 with a Retry-After
for --waking-for; the burst's own agents' lags are then printed apart
("others"), to show whether the neighbours held them up.

Fire tokens are signed with --alg, by default ES256 as a NAS with no
signing_alg signs; --alg EdDSA measures the cheaper signature (and
verification) an EdDSA deployment gets.

--delivery direct arms every job for direct delivery under its own cron key
(sealed in the store under a throwaway encryption key): the dispatchers sign
each fire with HS256 under the job's key, as the dispatchers of chronos nas
and chronos relay do for an agent with delivery: direct, and the sink
verifies it with that key as such an agent does. --delivery both runs the
mediated burst, then the direct one, and prints both and the ratio of their
fires per CPU second.

--dispatch relay runs the dispatchers as a chronos relay process does
(in this process still): a mediated fire is POSTed, signed, to NAS's relay
route, which calls the sink; a direct fire goes from the dispatcher to the
sink with no hop to NAS.`,
		Args: cobra.NoArgs,
		RunE: b.run,
	}
	f := c.Flags()
	f.StringVar(&b.o.Store, "store", "memory", "relay store: memory, a redis:// URL (keys go under a fresh prefix) or a postgres:// URL (tables go in a fresh schema), removed after")
	f.IntVar(&b.o.N, "n", 10000, "fires due at the same instant")
	f.StringVar(&b.at, "at", "+2s", "when the (first) fire is due, after the start")
	f.StringVar(&b.rate, "rate", "", "spread fires at this rate instead (e.g. 1000/s)")
	f.DurationVar(&b.o.Duration, "duration", 10*time.Second, "with --rate: how long fires keep coming")
	f.IntVar(&b.o.Agents, "agents", 100, "agents the fires are spread over")
	f.IntVar(&b.o.Dispatchers, "dispatchers", 2, "dispatchers")
	f.IntVar(&b.o.Concurrency, "concurrency", 64, "deliveries in flight per dispatcher")
	f.IntVar(&b.o.ArmWorkers, "arm-workers", 8, "parallel arming calls")
	f.DurationVar(&b.o.Timeout, "timeout", 0, "give up waiting for deliveries after this (default: at + duration + 1m + 1s per 1000 fires)")
	f.StringVar(&b.o.Alg, "alg", nas.DefaultSigningAlg, "fire-token algorithm: ES256, EdDSA or RS256")
	f.IntVar(&b.o.Neighbours.Slow, "slow", 0, "add this many fires of a slow agent, due with the burst")
	f.DurationVar(&b.o.Neighbours.SlowAnswer, "slow-answer", time.Second, "how long the slow agent takes to answer")
	f.IntVar(&b.o.Neighbours.Waking, "waking", 0, "add this many fires of a waking agent (503 with Retry-After), due with the burst")
	f.DurationVar(&b.o.Neighbours.WakingFor, "waking-for", 10*time.Second, "how long after fire_at the waking agent answers 503")
	f.DurationVar(&b.o.Neighbours.RetryAfter, "waking-retry-after", 5*time.Second, "the Retry-After of the waking agent's 503s")
	f.StringVar(&b.o.Dispatch, "dispatch", relaybench.DispatchNAS, "where the dispatchers run: nas (in NAS's process, as chronos nas) or relay (as a chronos relay process: mediated fires go through NAS's relay route)")
	f.StringVar(&b.delivery, "delivery", relaybench.DeliveryNAS, "nas (NAS signs each fire), direct (each job's cron key signs it) or both, one after the other")
	f.BoolVar(&b.asJSON, "json", false, "print the result as JSON")
	f.StringVar(&b.profile, "cpuprofile", "", "write a CPU profile of the run to this file")
	f.StringVar(&b.memProfile, "memprofile", "", "write an allocation profile of the run to this file")
	return c
}

// run checks the flags, runs the benchmark and prints its result.
func (b *benchRelayFlags) run(cmd *cobra.Command, _ []string) error {
	var err error
	if b.o.At, err = relaybench.ParseOffset(b.at); err != nil {
		return usagef("--at: %v", err)
	}
	if b.rate != "" && cmd.Flags().Changed("n") {
		return usagef("--n and --rate exclude each other (with --rate, n = rate × duration)")
	}
	if b.rate != "" {
		if b.o.Rate, err = relaybench.ParseRate(b.rate); err != nil {
			return usagef("--rate: %v", err)
		}
	}
	modes := []string{b.delivery}
	switch b.delivery {
	case relaybench.DeliveryNAS, relaybench.DeliveryDirect:
	case "both":
		modes = []string{relaybench.DeliveryNAS, relaybench.DeliveryDirect}
	default:
		return usagef("--delivery %q is not nas, direct or both", b.delivery)
	}
	b.o.Delivery = modes[0]
	if err := b.o.Validate(); err != nil {
		return asUsage(err)
	}
	if b.profile != "" {
		stop, err := cmdline.StartCPUProfile(b.profile)
		if err != nil {
			return fmt.Errorf("bench relay: %w", err)
		}
		defer stop()
	}
	writeAllocs := func() error { return nil }
	if b.memProfile != "" {
		if writeAllocs, err = cmdline.StartAllocProfile(b.memProfile); err != nil {
			return fmt.Errorf("bench relay: %w", err)
		}
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
	var results []*relaybench.Result
	for _, mode := range modes {
		o := b.o
		o.Delivery = mode
		var res *relaybench.Result
		res, err = relaybench.Run(cmd.Context(), o, log)
		if res != nil {
			results = append(results, res)
		}
		if err == nil && (res.Lost > 0 || res.Failed > 0) {
			err = fmt.Errorf("bench relay: %s delivery: %d fires lost, %d tokens failed verification", mode, res.Lost, res.Failed)
		}
		if err != nil {
			break
		}
	}
	if perr := writeAllocs(); perr != nil && err == nil {
		err = fmt.Errorf("bench relay: %w", perr)
	}
	b.print(cmd.OutOrStdout(), results)
	return err
}

// print writes the results: one as it is, both deliveries' side by side
// with the ratio of their fires per CPU second.
func (b *benchRelayFlags) print(w io.Writer, results []*relaybench.Result) {
	if len(results) == 0 {
		return
	}
	if len(results) == 1 {
		if b.asJSON {
			_ = cmdline.WriteJSON(w, results[0])
		} else {
			results[0].WriteText(w)
		}
		return
	}
	cmp := relaybench.Compare(results[0], results[1])
	if b.asJSON {
		_ = cmdline.WriteJSON(w, cmp)
		return
	}
	cmp.WriteText(w)
}
