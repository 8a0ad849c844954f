package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/nas/node"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// benchRelayOptions are the settings of one `chronos bench relay` run.
type benchRelayOptions struct {
	Store       string
	N           int
	At          time.Duration // first fire_at, after the run starts
	Rate        float64       // fires per second; 0 = all at once
	Duration    time.Duration // with Rate: how long fires keep coming
	Agents      int
	Dispatchers int
	Concurrency int
	ArmWorkers  int
	Timeout     time.Duration
	Alg         string // fire-token signing algorithm
}

// benchRelayResult is what a run measured. Durations are in milliseconds.
type benchRelayResult struct {
	Store          string  `json:"store"`
	SigningAlg     string  `json:"signing_alg"`
	Fires          int     `json:"fires"`
	Mode           string  `json:"mode"`
	Dispatchers    int     `json:"dispatchers"`
	Concurrency    int     `json:"concurrency"`
	Agents         int     `json:"agents"`
	ArmSeconds     float64 `json:"arm_seconds"`
	ArmRate        float64 `json:"arm_rate_per_s"`
	ArmedLate      bool    `json:"armed_after_first_fire_at"`
	DrainSeconds   float64 `json:"drain_seconds"`
	DrainRate      float64 `json:"drain_rate_per_s"`
	LagP50Ms       float64 `json:"lag_p50_ms"`
	LagP99Ms       float64 `json:"lag_p99_ms"`
	LagMaxMs       float64 `json:"lag_max_ms"`
	BytesPerArmed  float64 `json:"redis_bytes_per_armed,omitempty"`
	CPUPerFireUs   float64 `json:"cpu_per_fire_us"`
	RedisCPUFireUs float64 `json:"redis_cpu_per_fire_us,omitempty"`
	Delivered      int     `json:"delivered"`
	Verified       int64   `json:"verified"`
	Failed         int64   `json:"failed"`
	Duplicates     int64   `json:"duplicates"`
	Lost           int     `json:"lost"`
	LeftInStore    int64   `json:"left_in_store"`
}

func newBenchRelayCmd() *cobra.Command {
	var (
		o        benchRelayOptions
		at, rate string
		asJSON   bool
		profile  string
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
			if o.At, err = parseOffset(at); err != nil {
				return usagef("--at: %v", err)
			}
			if rate != "" {
				if cmd.Flags().Changed("n") {
					return usagef("--n and --rate exclude each other (with --rate, n = rate × duration)")
				}
				if o.Rate, err = parseRate(rate); err != nil {
					return usagef("--rate: %v", err)
				}
				if o.Duration <= 0 {
					return usagef("--duration must be positive with --rate")
				}
				o.N = int(math.Round(o.Rate * o.Duration.Seconds()))
			}
			switch o.Alg {
			case nas.AlgES256, nas.AlgEdDSA, nas.AlgRS256:
			default:
				return usagef("--alg %q is not ES256, EdDSA or RS256", o.Alg)
			}
			if o.N < 1 || o.Agents < 1 || o.Dispatchers < 1 || o.Concurrency < 1 || o.ArmWorkers < 1 {
				return usagef("--n, --agents, --dispatchers, --concurrency and --arm-workers must be at least 1")
			}
			if o.Timeout == 0 {
				o.Timeout = o.At + o.Duration + time.Minute + time.Duration(o.N/1000)*time.Second
			}
			if profile != "" {
				stop, err := startCPUProfile(profile)
				if err != nil {
					return err
				}
				defer stop()
			}
			res, err := runBenchRelay(cmd.Context(), o, cmd.ErrOrStderr())
			if res != nil {
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					_ = enc.Encode(res)
				} else {
					printBenchRelay(cmd.OutOrStdout(), res)
				}
			}
			if err != nil {
				return err
			}
			if res.Lost > 0 || res.Failed > 0 {
				return fmt.Errorf("bench relay: %d fires lost, %d tokens failed verification", res.Lost, res.Failed)
			}
			return nil
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

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench relay: cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench relay: cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// parseOffset reads "+2s" or "2s".
func parseOffset(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

// parseRate reads "1000/s", "60000/m" or "1000".
func parseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(s, "/")
	r, err := strconv.ParseFloat(num, 64)
	if err != nil || r <= 0 || math.IsInf(r, 0) {
		return 0, fmt.Errorf("%q is not a positive rate", s)
	}
	switch unit {
	case "", "s":
		return r, nil
	case "m":
		return r / 60, nil
	default:
		return 0, fmt.Errorf("%q: unit must be /s or /m", s)
	}
}

// benchRelayStore opens the store of a run; cleanup removes what it wrote.
func benchRelayStore(ctx context.Context, store string, log *slog.Logger) (relay.Engine, goredis.UniversalClient, func(), error) {
	if store == "memory" {
		e := memory.New(memory.Options{})
		return e, nil, func() { _ = e.Close() }, nil
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "bench-" + hex.EncodeToString(b[:])
	e, err := relayredis.Open(ctx, store, relayredis.Options{Prefix: prefix, Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bench relay: store: %w", err)
	}
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		deleteKeys(cctx, e.Client(), "{chronos:"+prefix+":*")
		_ = e.Close()
	}
	return e, e.Client(), cleanup, nil
}

// deleteKeys unlinks every key matching pattern, best effort.
func deleteKeys(ctx context.Context, c goredis.UniversalClient, pattern string) {
	var batch []string
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) >= 500 {
			c.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		c.Unlink(ctx, batch...)
	}
}

// runBenchRelay performs one run. A non-nil result comes back whenever the
// delivery phase ran, even if it then failed.
func runBenchRelay(ctx context.Context, o benchRelayOptions, stderr io.Writer) (*benchRelayResult, error) {
	if o.Alg == "" {
		o.Alg = nas.DefaultSigningAlg
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	engine, rc, cleanup, err := benchRelayStore(ctx, o.Store, log)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	// NAS, in process, on loopback: the real relay route, signer and minter.
	nasLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench relay: listen: %w", err)
	}
	sinkLns, err := listenSink()
	if err != nil {
		nasLn.Close()
		return nil, err
	}
	nasURL := "http://" + nasLn.Addr().String()
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	cfg := nas.Config{
		Listen: nasLn.Addr().String(), PublicURL: nasURL, Store: "memory",
		Relay:                 nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(secret)}, NASURL: nasURL},
		AllowPrivateCallbacks: true, LogLevel: "error",
	}
	keys, err := nas.NewEphemeralKeyRing(o.Alg)
	if err != nil {
		return nil, fmt.Errorf("bench relay: keys: %w", err)
	}
	svc, err := nas.New(nas.Options{Config: cfg, Engine: engine, Verifier: nas.MultiVerifier{}, Keys: keys, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("bench relay: nas: %w", err)
	}
	srv := nashttp.NewServer(svc, nashttp.Options{Logger: log})
	var servers sync.WaitGroup
	defer servers.Wait()
	defer cancel()
	servers.Go(func() { _ = srv.Serve(ctx, nasLn) })

	jwks, err := fetchJWKS(ctx, nasURL+contract.PathJWKS)
	if err != nil {
		return nil, err
	}
	sink := newBenchSink(nasURL, jwks, o.N, log)
	defer sink.close()
	sinkSrv := &http.Server{Handler: sink, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	sinkURLs := make([]string, len(sinkLns))
	for i, ln := range sinkLns {
		servers.Go(func() { _ = sinkSrv.Serve(ln) })
		sinkURLs[i] = "http://" + ln.Addr().String()
	}
	defer sinkSrv.Close()

	deliverer, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{
		NASURL: nasURL, Keys: [][]byte{secret}, Logger: log, MaxConns: o.Concurrency * o.Dispatchers,
	})
	if err != nil {
		return nil, fmt.Errorf("bench relay: deliverer: %w", err)
	}
	defer deliverer.Close()
	dctx, stopDispatchers := context.WithCancel(ctx)
	var dispatchers sync.WaitGroup
	defer dispatchers.Wait()
	defer stopDispatchers()
	for range o.Dispatchers {
		d := relay.NewDispatcher(engine, deliverer, relay.DispatcherConfig{
			Concurrency: o.Concurrency, Logger: log, DrainTimeout: 5 * time.Second,
		})
		dispatchers.Go(func() { _ = d.Run(dctx) })
	}

	// Arm.
	res := &benchRelayResult{Store: node.StoreKind(o.Store), SigningAlg: o.Alg, Fires: o.N, Mode: "burst", Dispatchers: o.Dispatchers,
		Concurrency: o.Concurrency, Agents: o.Agents}
	if o.Rate > 0 {
		res.Mode = fmt.Sprintf("rate %.0f/s for %s", o.Rate, o.Duration)
	}
	var memBefore int64
	if rc != nil {
		memBefore, _ = redisInfoInt(ctx, rc, "memory", "used_memory")
	}
	start := time.Now()
	first := start.Add(o.At)
	var runID [6]byte
	_, _ = rand.Read(runID[:])
	if err := benchArm(ctx, engine, o, first, sinkURLs, hex.EncodeToString(runID[:])); err != nil {
		return nil, err
	}
	armed := time.Now()
	res.ArmSeconds = armed.Sub(start).Seconds()
	res.ArmRate = float64(o.N) / res.ArmSeconds
	res.ArmedLate = armed.After(first)
	if rc != nil {
		if after, err := redisInfoInt(ctx, rc, "memory", "used_memory"); err == nil {
			res.BytesPerArmed = float64(after-memBefore) / float64(o.N)
		}
	}

	// Deliver: from the end of arming until the last fire arrived.
	cpu0 := processCPU()
	var rcpu0 float64
	if rc != nil {
		rcpu0 = redisCPU(ctx, rc)
	}
	wctx, wcancel := context.WithTimeout(ctx, o.Timeout)
	waitErr := sink.wait(wctx)
	wcancel()
	cpu := processCPU() - cpu0
	if rc != nil {
		res.RedisCPUFireUs = (redisCPU(ctx, rc) - rcpu0) * 1e6 / float64(o.N)
	}
	lags, last := sink.results()
	res.Delivered = len(lags)
	res.Lost = o.N - len(lags)
	res.Verified = sink.verified.Load()
	res.Failed = sink.failed.Load()
	res.Duplicates = sink.duplicates.Load()
	res.CPUPerFireUs = cpu.Seconds() * 1e6 / float64(max(len(lags), 1))
	if len(lags) > 0 {
		slices.Sort(lags)
		res.LagP50Ms = msOf(percentile(lags, 0.50))
		res.LagP99Ms = msOf(percentile(lags, 0.99))
		res.LagMaxMs = msOf(lags[len(lags)-1])
		from := first
		if armed.After(from) {
			from = armed
		}
		res.DrainSeconds = last.Sub(from).Seconds()
		if res.DrainSeconds > 0 {
			res.DrainRate = float64(len(lags)) / res.DrainSeconds
		}
	}
	// Every delivered fire is acked shortly after; count what is left.
	settle, scancel := context.WithTimeout(ctx, 10*time.Second)
	for {
		st, err := engine.Stats(settle)
		if err == nil {
			res.LeftInStore = st.Armed
		}
		if err != nil || st.Armed == 0 || settle.Err() != nil || waitErr != nil {
			break
		}
		select {
		case <-settle.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	scancel()
	if waitErr != nil {
		return res, fmt.Errorf("bench relay: %w (%d of %d within %s)", waitErr, res.Delivered, o.N, o.Timeout)
	}
	return res, nil
}

// sinkHosts is how many loopback addresses the agent sink listens on: agents
// are spread over them as they would be over hosts, so that NAS's per-host
// connection pool sees several hosts.
const sinkHosts = 16

// listenSink listens on 127.0.0.1 and, where the system routes them to the
// loopback interface (Linux), on 127.0.0.2 to 127.0.0.16.
func listenSink() ([]net.Listener, error) {
	var lns []net.Listener
	for i := 1; i <= sinkHosts; i++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i))
		if err != nil {
			if i == 1 {
				return nil, fmt.Errorf("bench relay: listen: %w", err)
			}
			break
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// benchArm arms the run's one-shots with ArmWorkers parallel callers.
func benchArm(ctx context.Context, engine relay.Engine, o benchRelayOptions, first time.Time, sinkURLs []string, runID string) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, o.ArmWorkers)
	for range o.ArmWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= o.N {
					return
				}
				at := first
				if o.Rate > 0 {
					at = first.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
				}
				agent := fmt.Sprintf("agent-%04d", i%o.Agents)
				_, err := engine.Arm(ctx, relay.ArmRequest{
					AgentID: agent, InstanceID: benchInstance(agent), JobID: fmt.Sprintf("job-%07d", i),
					FireAt: at, CallbackURL: sinkURLs[(i%o.Agents)%len(sinkURLs)] + "/agents/" + agent,
					ScheduleID: fmt.Sprintf("sch_%s%020d", runID, i),
				})
				if err != nil {
					errc <- fmt.Errorf("bench relay: arm: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// fetchJWKS reads NAS's key set, as an agent would.
func fetchJWKS(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bench relay: jwks: %w", err)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("bench relay: jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench relay: jwks: status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if err != nil {
		return nil, fmt.Errorf("bench relay: jwks: %w", err)
	}
	return b, nil
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisInfoInt reads an integer field of an INFO section.
func redisInfoInt(ctx context.Context, c goredis.UniversalClient, section, field string) (int64, error) {
	v, err := redisInfoField(ctx, c, section, field)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// redisCPU is the Redis server's user + system CPU seconds so far.
func redisCPU(ctx context.Context, c goredis.UniversalClient) float64 {
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := redisInfoField(ctx, c, "cpu", f)
		if err != nil {
			return 0
		}
		x, _ := strconv.ParseFloat(v, 64)
		total += x
	}
	return total
}

// redisInfoField reads one field of an INFO section.
func redisInfoField(ctx context.Context, c goredis.UniversalClient, section, field string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", fmt.Errorf("bench relay: info: %w", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("bench relay: info has no %s", field)
}

// percentile returns the p-quantile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func msOf(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// printBenchRelay writes a result for people.
func printBenchRelay(w io.Writer, r *benchRelayResult) {
	fmt.Fprintf(w, "store %s, %d fires (%s), %d agents, %d dispatchers × %d concurrency, %s tokens\n",
		r.Store, r.Fires, r.Mode, r.Agents, r.Dispatchers, r.Concurrency, r.SigningAlg)
	late := ""
	if r.ArmedLate {
		late = " (arming ended after the first fire_at: lags include arming)"
	}
	fmt.Fprintf(w, "arm:    %.0f/s (%.2fs)%s\n", r.ArmRate, r.ArmSeconds, late)
	fmt.Fprintf(w, "drain:  %.0f fires/s (%.2fs)\n", r.DrainRate, r.DrainSeconds)
	fmt.Fprintf(w, "lag:    p50 %.1fms  p99 %.1fms  max %.1fms after fire_at\n", r.LagP50Ms, r.LagP99Ms, r.LagMaxMs)
	if r.BytesPerArmed > 0 {
		fmt.Fprintf(w, "redis:  %.0f bytes per armed one-shot, %.0fµs Redis CPU per fire\n", r.BytesPerArmed, r.RedisCPUFireUs)
	}
	fmt.Fprintf(w, "cpu:    %.0fµs per fire (this process: NAS, dispatchers, agent sink)\n", r.CPUPerFireUs)
	fmt.Fprintf(w, "tokens: %d verified, %d failed; %d duplicates; %d lost; %d left in the store\n",
		r.Verified, r.Failed, r.Duplicates, r.Lost, r.LeftInStore)
}
