package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"

	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/internal/relaybench"
	"github.com/chronoscron/chronos/nas"
)

func newBenchCmd() *cobra.Command {
	return groupCmd("bench", "Measure Chronos on this machine", newBenchRelayCmd())
}

func newBenchRelayCmd() *cobra.Command {
	var (
		o                 relaybench.Options
		at, rate, profile string
		asJSON            bool
	)
	c := &cobra.Command{
		Use:   "relay",
		Short: "Arm one-shots, deliver them through the real relay route, and measure",
		Long: `Arm one-shots in a store and deliver them end to end: dispatchers claim them
and POST the signed relay route of an in-process NAS on loopback, which mints
a real cron_fire token and calls a built-in agent sink that verifies every
token against NAS's JWKS and the body hash.

Either --n fires due at the same instant (--at after the start), or --rate
fires per second for --duration starting --at after the start. It prints the
arm rate, the drain rate, the lag after fire_at (p50, p99, max), Redis bytes
per armed one-shot (redis stores), CPU per fire of this process (and of Redis),
and the verified and failed counts. It exits 1 if any fire is lost or any
token fails verification.

Fire tokens are signed with --alg, by default ES256 as a NAS with no
signing_alg signs; --alg EdDSA measures the cheaper signature (and
verification) an EdDSA deployment gets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.At, err = relaybench.ParseOffset(at); err != nil {
				return usagef("--at: %v", err)
			}
			if rate != "" {
				if cmd.Flags().Changed("n") {
					return usagef("--n and --rate exclude each other (with --rate, n = rate × duration)")
				}
				if o.Rate, err = relaybench.ParseRate(rate); err != nil {
					return usagef("--rate: %v", err)
				}
				if o.Duration <= 0 {
					return usagef("--duration must be positive with --rate")
				}
				o.N = int(math.Round(o.Rate * o.Duration.Seconds()))
			}
			if err := o.Validate(); err != nil {
				return asUsage(err)
			}
			if profile != "" {
				f, err := os.Create(profile)
				if err == nil {
					err = pprof.StartCPUProfile(f)
				}
				if err != nil {
					return fmt.Errorf("bench relay: cpuprofile: %w", err)
				}
				defer f.Close()
				defer pprof.StopCPUProfile()
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
			res, err := relaybench.Run(cmd.Context(), o, log)
			if res != nil && asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				_ = enc.Encode(res)
			} else if res != nil {
				res.WriteText(cmd.OutOrStdout())
			}
			if err == nil && (res.Lost > 0 || res.Failed > 0) {
				err = fmt.Errorf("bench relay: %d fires lost, %d tokens failed verification", res.Lost, res.Failed)
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&o.Store, "store", "memory", "relay store: memory or a redis:// URL (keys go under a fresh prefix, removed after)")
	f.IntVar(&o.N, "n", 10000, "fires due at the same instant")
	f.StringVar(&at, "at", "+2s", "when the (first) fire is due, after the start")
	f.StringVar(&rate, "rate", "", "spread fires at this rate instead (e.g. 1000/s)")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "with --rate: how long fires keep coming")
	f.IntVar(&o.Agents, "agents", 100, "agents the fires are spread over")
	f.IntVar(&o.Dispatchers, "dispatchers", 2, "dispatchers")
	f.IntVar(&o.Concurrency, "concurrency", 64, "deliveries in flight per dispatcher")
	f.IntVar(&o.ArmWorkers, "arm-workers", 8, "parallel arming calls")
	f.DurationVar(&o.Timeout, "timeout", 0, "give up waiting for deliveries after this (default: at + duration + 1m + 1s per 1000 fires)")
	f.StringVar(&o.Alg, "alg", nas.DefaultSigningAlg, "fire-token algorithm: ES256, EdDSA or RS256")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the run to this file")
	return c
}
