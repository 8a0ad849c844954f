package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/fireauth"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

func newDemoCmd() *cobra.Command {
	var o demoOptions
	c := &cobra.Command{
		Use:   "demo [--for DURATION] [--home DIR]",
		Short: "Run NAS, its relay and an agent in one process with sample jobs",
		Long: `Run the whole of Chronos in one process, with no Redis and no config: NAS on the
embedded relay engine with a dispatcher, and an agent with a temporary home,
all on 127.0.0.1 ephemeral ports, with signing keys made in memory. A few
sample jobs are added (an interval, a one-shot, a zoned cron line with
seconds) and every step of every fire is logged as it happens:

  armed → relayed → token verified → claimed → ran → re-armed

Ctrl-C (or the end of --for) stops it and prints a summary from the agent's
run ledger: fires per job, lateness, duplicates and failures.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.For < 0 {
				return usagef("demo: --for %s must not be negative", o.For)
			}
			ctx := cmd.Context()
			if o.For > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, o.For)
				defer cancel()
			}
			return runDemo(ctx, o, cmd.OutOrStdout())
		},
	}
	c.Flags().DurationVar(&o.For, "for", 0, "stop by itself after this long (0: until Ctrl-C)")
	c.Flags().StringVar(&o.Home, "home", "", "the agent's home directory, kept after the demo (default: a temporary one, removed)")
	return c
}

// demoOptions are the demo's settings.
type demoOptions struct {
	For  time.Duration
	Home string
}

// demoJob is a sample job of the demo.
type demoJob struct {
	id, schedule, command, about string
}

// demoJobs are the sample jobs: the first fires within 3 s of the start.
var demoJobs = []demoJob{
	{"tick", "every 3s", `echo "tick for slot $CHRONOS_FIRE_AT"`, "an interval, anchored at creation"},
	{"once", "in 5s", `echo "one-shot run $CHRONOS_RUN_ID"`, "a one-shot, 5 s after creation"},
	{"paris", "CRON_TZ=Europe/Paris */10 * * * * *", `echo "Paris says $(TZ=Europe/Paris date +%H:%M:%S)"`, "cron with seconds, in a zone"},
}

// Identity of the demo's one agent.
const (
	demoAgentID    = "demo-agent"
	demoInstanceID = "demo-instance"
)

// runDemo runs the demo until ctx ends, then prints the summary. It returns
// nil on a normal end (Ctrl-C or --for).
func runDemo(ctx context.Context, o demoOptions, out io.Writer) error {
	start := time.Now()
	dl := newDemoLog(out, start)

	home := o.Home
	if home == "" {
		tmp, err := os.MkdirTemp("", "chronos-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer os.RemoveAll(tmp)
		home = tmp
	} else if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("demo: home: %w", err)
	}

	var lns []net.Listener
	listen := func() (net.Listener, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			lns = append(lns, ln)
		}
		return ln, err
	}
	// Until the servers take them over, the listeners (and, once open, the
	// runtime) are released here on every early return.
	serving := false
	defer func() {
		if !serving {
			for _, ln := range lns {
				ln.Close()
			}
		}
	}()
	pubLn, err := listen()
	if err != nil {
		return fmt.Errorf("demo: listen: %w", err)
	}
	relayLn, err := listen()
	if err != nil {
		return fmt.Errorf("demo: listen: %w", err)
	}
	agentLn, err := listen()
	if err != nil {
		return fmt.Errorf("demo: listen: %w", err)
	}
	publicURL := "http://" + pubLn.Addr().String()
	relayURL := "http://" + relayLn.Addr().String()
	agentURL := "http://" + agentLn.Addr().String()

	// NAS on the embedded engine.
	nasLog := newObserveLogger(dl, "nas")
	relayLog := newObserveLogger(dl, "relay")
	agentLog := newObserveLogger(dl, "agent")
	engine := memory.New(memory.Options{})
	defer engine.Close()
	keys, err := nas.NewEphemeralKeyRing(nas.DefaultSigningAlg)
	if err != nil {
		return fmt.Errorf("demo: keys: %w", err)
	}
	token := randomHex(24)
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: demoAgentID, InstanceID: demoInstanceID, TokenSHA256: nas.TokenSHA256(token)}})
	if err != nil {
		return fmt.Errorf("demo: agents: %w", err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	svc, err := nas.New(nas.Options{
		Config: nas.Config{
			Listen: pubLn.Addr().String(), RelayListen: relayLn.Addr().String(), PublicURL: publicURL,
			Relay:                 nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(secret)}},
			AllowPrivateCallbacks: true, DeliveryTimeout: 10 * time.Second,
		},
		Engine: engine, Verifier: agents, Keys: keys, Logger: nasLog,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer svc.Close()
	srv := nashttp.NewServer(svc, nashttp.Options{Split: true, Logger: nasLog})

	// The relay: a dispatcher calling NAS's relay route, each call logged.
	httpDeliverer, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: relayURL, Keys: [][]byte{secret}, Logger: relayLog, Timeout: 20 * time.Second})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer httpDeliverer.Close()
	deliverer := relay.DelivererFunc(func(ctx context.Context, l relay.Lease) relay.Outcome {
		dl.step(l.JobID, stepRelayed, fmt.Sprintf("attempt %d: dispatcher → NAS relay route, %s after fire_at", l.Attempt, roundDur(time.Since(l.FireAt))))
		out := httpDeliverer.Deliver(ctx, l)
		if out.Kind != relay.Done {
			dl.step(l.JobID, strings.ToLower(out.Kind.String()), out.Reason)
		}
		return out
	})
	disp := relay.NewDispatcher(engine, deliverer, relay.DispatcherConfig{Logger: relayLog, Metrics: svc.Metrics().Relay()})

	// The agent: a runtime on the home, the fire endpoint, reconcile.
	rt, err := agent.Open(ctx, agent.Config{Home: home, Logger: agentLog})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		if !serving {
			_ = rt.Close(context.Background())
		}
	}()
	dl.ranDetail = func(jobID, runID string) string { return runDetail(rt, home, jobID, runID) }
	verifier, err := fireauth.New(ctx, fireauth.Config{
		JWKSURL: publicURL + contract.PathJWKS, Issuer: publicURL,
		Audience: contract.Audience(demoInstanceID), Logger: agentLog,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer verifier.Close()
	nc, err := nasclient.New(nasclient.Config{PortalURL: publicURL, AccessToken: token, Logger: agentLog})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{
		Source: rt, NAS: nc, CallbackURL: agentURL, Home: home, By: "agent", CatchUp: true, Logger: agentLog,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fireSrv := agenthttp.New(agenthttp.Config{
		Firer: rt, Verifier: observedVerifier{v: verifier, log: dl}, Logger: newObserveLogger(dl, "agenthttp"),
		Checks: map[string]agenthttp.Check{"jwks": func(context.Context) error {
			if !verifier.Ready() {
				return errors.New("NAS's keys are not loaded yet")
			}
			return nil
		}},
	})
	agentSrv := agenthttp.NewHTTPServer(fireSrv)

	serving = true
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ctx, pubLn) })
	wg.Go(func() { _ = srv.ServeInternal(ctx, relayLn) })
	wg.Go(func() { _ = disp.Run(ctx) })
	wg.Go(func() { _ = agentSrv.Serve(agentLn) })
	wg.Go(func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = agentSrv.Shutdown(sctx)
	})

	dl.header("Chronos demo: NAS, its relay and an agent in one process (embedded engine, no Redis).")
	dl.header("  NAS    %s  (agent API, JWKS)   relay route %s", publicURL, relayURL)
	where := "temporary, removed at exit; --home DIR keeps one"
	if o.Home != "" {
		where = "kept"
	}
	dl.header("  agent  %s  home %s (%s)", agentURL, home, where)

	err = demoStart(ctx, rt, verifier, dl)
	if err == nil {
		wg.Go(func() { _ = rec.Run(ctx, rt.Changes()) })
		dl.header("Ctrl-C stops the demo and prints a summary.")
		dl.header("")
		dl.header("%10s  %-10s %-15s %s", "TIME", "JOB", "STEP", "DETAIL")
	}
	<-ctx.Done()
	wg.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = rt.Close(cctx)
	cancel()
	if err != nil {
		return err
	}
	return demoSummary(out, rt, home, o.Home != "", time.Since(start))
}

// demoStart waits for the agent's key set and adds the sample jobs.
func demoStart(ctx context.Context, rt *agent.Runtime, v *fireauth.JWTVerifier, dl *demoLog) error {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := v.WaitReady(wctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("demo: the agent could not load NAS's keys: %w", err)
	}
	dl.header("  jobs")
	for _, j := range demoJobs {
		spec := agent.JobSpec{ID: j.id, Name: j.about, Schedule: j.schedule,
			Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: j.command}}, Timeout: 30 * time.Second}
		job, _, err := rt.AddJob(ctx, spec)
		switch {
		case errors.Is(err, store.ErrExists):
			job, err = rt.Job(ctx, j.id)
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
		case err != nil:
			return fmt.Errorf("demo: add job %s: %w", j.id, err)
		}
		next := "none"
		if job.NextRunAt != nil {
			next = clock(*job.NextRunAt)
		}
		dl.header("    %-6s %-38s %s; first fire %s", j.id, j.schedule, j.about, next)
	}
	return nil
}

// runDetail describes a finished run from the ledger: exit code and the first
// line of its output.
func runDetail(rt *agent.Runtime, home, jobID, runID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	runs, err := rt.Ledger().Runs(ctx, ledger.Filter{JobID: jobID})
	if err != nil {
		return ""
	}
	for _, r := range runs {
		if r.RunID != runID {
			continue
		}
		detail := fmt.Sprintf("exit %d", r.ExitCode)
		if r.Output != "" {
			if b, err := os.ReadFile(filepath.Join(home, r.Output)); err == nil {
				line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
				if len(line) > 60 {
					line = line[:60] + "…"
				}
				detail += fmt.Sprintf(", output %q", line)
			}
		}
		return detail
	}
	return ""
}

// demoSummary prints, per job, what the ledger says happened.
func demoSummary(out io.Writer, rt *agent.Runtime, home string, kept bool, ran time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	runs, err := rt.Ledger().Runs(ctx, ledger.Filter{})
	if err != nil {
		return fmt.Errorf("demo: summary: %w", err)
	}
	type stats struct {
		fires, ok, failed, dup, other int
		late                          []int64
	}
	per := map[string]*stats{}
	for _, j := range demoJobs {
		per[j.id] = &stats{}
	}
	for _, r := range runs {
		s := per[r.JobID]
		if s == nil {
			s = &stats{}
			per[r.JobID] = s
		}
		switch r.State {
		case ledger.StateDuplicate:
			s.dup++
			continue
		case ledger.StateSkipped, ledger.StateMissed:
			s.other++
			continue
		case ledger.StateSucceeded:
			s.ok++
		case ledger.StateFailed, ledger.StateInterrupted:
			s.failed++
		}
		s.fires++
		s.late = append(s.late, r.LatenessMS)
	}
	ids := make([]string, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	where := "from the run ledger, removed with the temporary home"
	if kept {
		where = "from the run ledger in " + filepath.Join(home, "runs") + "; chronos runs list --home " + home + " shows every run"
	}
	fmt.Fprintf(out, "\nSummary after %s (%s):\n", roundDur(ran), where)
	fmt.Fprintf(out, "  %-8s %6s %10s %7s %11s %15s %13s %13s\n", "JOB", "FIRES", "SUCCEEDED", "FAILED", "DUPLICATES", "MISSED/SKIPPED", "LATENESS p50", "LATENESS max")
	total := stats{}
	for _, id := range ids {
		s := per[id]
		p50, mx := "-", "-"
		if len(s.late) > 0 {
			sort.Slice(s.late, func(i, j int) bool { return s.late[i] < s.late[j] })
			p50 = roundDur(time.Duration(s.late[(len(s.late)-1)/2]) * time.Millisecond)
			mx = roundDur(time.Duration(s.late[len(s.late)-1]) * time.Millisecond)
		}
		fmt.Fprintf(out, "  %-8s %6d %10d %7d %11d %15d %13s %13s\n", id, s.fires, s.ok, s.failed, s.dup, s.other, p50, mx)
		total.fires += s.fires
		total.failed += s.failed
		total.dup += s.dup
	}
	fmt.Fprintf(out, "  %d fires, %d failures, %d duplicates answered without a second run.\n", total.fires, total.failed, total.dup)
	return nil
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The verifier the demo hands to the fire endpoint.
var _ agenthttp.FireVerifier = observedVerifier{}
