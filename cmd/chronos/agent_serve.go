package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/activation"
	"github.com/chronoscron/chronos/agent/fireauth"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
)

type agentServeOptions struct {
	config   string
	home     string
	listen   string
	idleExit time.Duration
	logLevel string
	drain    time.Duration
}

func newAgentServeCmd() *cobra.Command {
	var o agentServeOptions
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the agent: the fire endpoint, reconcile with NAS or the built-in timer",
		Long: `Run the agent on its home directory.

With cron.provider: chronos (and every cron.chronos setting valid) the agent
keeps one armed one-shot per job at NAS and answers NAS's fires on
POST /api/cron/fire; otherwise it says why and fires jobs with the built-in
timer. A listening socket passed by systemd socket activation (LISTEN_FDS) is
used instead of the listen address, and --idle-exit lets the process stop when
nothing is left to do, so systemd starts it again on the next fire.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgentServe(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	configFlag(c, &o.config)
	c.Flags().StringVar(&o.home, "home", "", "the agent's home directory (overrides the config's home and $CHRONOS_HOME)")
	c.Flags().StringVar(&o.listen, "listen", "", "address of the fire endpoint and health routes (overrides the config's listen)")
	c.Flags().DurationVar(&o.idleExit, "idle-exit", 0, "exit (status 0) after this long with no request, no run in flight and NAS in sync; under the built-in timer also nothing due within it (0: never)")
	c.Flags().StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	c.Flags().DurationVar(&o.drain, "drain-timeout", 30*time.Second, "how long runs in progress may finish at shutdown before they are stopped and recorded interrupted")
	return c
}

// agentListener returns the socket passed by systemd, or a new one on addr.
func agentListener(addr string) (net.Listener, bool, error) {
	ln, err := activation.Listener(activation.Options{
		Getenv: os.Getenv, PID: os.Getpid(), AnyPID: os.Getenv(envListenPIDAny) == "1",
	})
	// Runs started later must not believe they were activated.
	for _, k := range []string{activation.EnvListenFDs, activation.EnvListenPID, activation.EnvListenFDNames, envListenPIDAny} {
		_ = os.Unsetenv(k)
	}
	if err != nil {
		return nil, false, fmt.Errorf("agent: %w", err)
	}
	if ln != nil {
		return ln, true, nil
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("agent: listen: %w", err)
	}
	return ln, false, nil
}

// recoverRuns retries rt.Recover with backoff until it succeeds or ctx
// ends.
func recoverRuns(ctx context.Context, rt *agent.Runtime, log *slog.Logger) {
	wait := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := rt.Recover(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		wait = min(2*wait, 30*time.Second)
		log.Error("settling the runs of a dead agent failed; trying again", "error", err, "in", wait.String())
	}
}

// agentNotify sends on a coalescing channel without blocking.
func agentNotify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func runAgentServe(ctx context.Context, o agentServeOptions, stderr io.Writer) error {
	if o.idleExit < 0 {
		return usagef("agent: --idle-exit must not be negative")
	}
	cfg, decision, err := loadAgentConfig(o.config, os.LookupEnv)
	if err != nil {
		return err
	}
	if o.home != "" {
		cfg.Home = o.home
	}
	if o.listen != "" {
		cfg.Listen = o.listen
	}
	log, err := agentLogger(stderr, o.logLevel)
	if err != nil {
		return err
	}
	loc, err := cfg.Location()
	if err != nil {
		return asUsage(err)
	}
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return fmt.Errorf("agent: home: %w", err)
	}
	started := time.Now()

	// Accept connections as early as possible: a woken agent's first fire is
	// already waiting in the socket's backlog.
	ln, activated, err := agentListener(cfg.Listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	log.Info("agent starting", "provider", decision.Provider, "why", decision.Why(),
		"listen", ln.Addr().String(), "socket_activated", activated, "home", cfg.Home, "idle_exit", o.idleExit.String())

	rt, err := agent.Open(ctx, agent.Config{Home: cfg.Home, Location: loc, Logger: log.With("component", "runtime")})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	// Runs whose agent died (killed, crashed) are found and settled before
	// any fire is taken; if the store cannot be written now, again until it
	// can.
	recoverErr := rt.Recover(runCtx)

	var (
		verifier    *fireauth.JWTVerifier
		rec         *provider.Reconciler
		resyncEvery time.Duration
	)
	if decision.Chronos() {
		ch := cfg.Cron.Chronos
		verifier, err = fireauth.New(runCtx, fireauth.Config{
			JWKSURL: ch.NASJWKSURL, Issuer: ch.ExpectedIssuer(), Audience: ch.ExpectedAudience,
			Logger: log.With("component", "fireauth"),
		})
		if err != nil {
			_ = rt.Close(context.WithoutCancel(ctx))
			return fmt.Errorf("agent: %w", err)
		}
		defer verifier.Close()
		nc, err := nasclient.New(nasclient.Config{PortalURL: ch.PortalURL, AccessToken: ch.AccessToken, Logger: log.With("component", "nasclient")})
		if err != nil {
			_ = rt.Close(context.WithoutCancel(ctx))
			return fmt.Errorf("agent: %w", err)
		}
		resync, err := ch.Resync()
		if err != nil {
			_ = rt.Close(context.WithoutCancel(ctx))
			return asUsage(err)
		}
		resyncEvery = resync
		rec, err = provider.NewReconciler(provider.ReconcilerConfig{
			Source: rt, NAS: nc, CallbackURL: ch.CallbackURL, Home: cfg.Home, By: "agent", CatchUp: true,
			ResyncInterval: resync, Logger: log.With("component", "reconcile"),
		})
		if err != nil {
			_ = rt.Close(context.WithoutCancel(ctx))
			return fmt.Errorf("agent: %w", err)
		}
	} else {
		for _, r := range decision.Reasons {
			log.Warn("chronos provider not in use", "reason", r)
		}
	}

	hcfg := agenthttp.Config{Firer: rt, Logger: log.With("component", "http")}
	if rec != nil {
		hcfg.Sync = rec
		// Readiness fails once the agent has been out of sync for longer
		// than the timer that would have healed it.
		hcfg.ResyncInterval = resyncEvery
	}
	if verifier != nil {
		hcfg.Verifier = verifier
		hcfg.ReconcileVerifier = verifier
		hcfg.Reconcile = func(string) { rec.Resync() }
		hcfg.Checks = map[string]agenthttp.Check{"jwks": func(context.Context) error {
			if !verifier.Ready() {
				return errors.New("NAS's key set is not loaded yet")
			}
			return nil
		}}
	}
	srv := agenthttp.New(hcfg)
	httpSrv := agenthttp.NewHTTPServer(srv)
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()

	agentState := func(stopped bool) {
		st := provider.AgentState{PID: os.Getpid(), Provider: decision.Provider, Why: decision.Why(),
			Listen: ln.Addr().String(), StartedAt: started, UpdatedAt: time.Now()}
		if verifier != nil {
			h := verifier.Health(runCtx)
			st.JWKS = &h
		}
		if stopped {
			at := time.Now()
			st.StoppedAt = &at
		}
		if err := provider.UpdateState(context.WithoutCancel(ctx), cfg.Home, func(s *provider.State) { s.Agent = &st }); err != nil {
			log.Warn("writing the agent state failed", "error", err)
		}
	}
	agentState(false)

	// Fan the runtime's change signal out to the reconciler and the idle
	// clock. Kick marks the reconciler out of sync at once, so an idle check
	// never sees a change that is still on its way.
	activity := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case <-rt.Changes():
				if rec != nil {
					rec.Kick()
				}
				agentNotify(activity)
			case <-srv.Activity():
				agentNotify(activity)
			}
		}
	})
	if recoverErr != nil {
		log.Error("settling the runs of a dead agent failed; trying again", "error", recoverErr)
		wg.Go(func() { recoverRuns(runCtx, rt, log) })
	}
	if rec != nil {
		wg.Go(func() { _ = rec.Run(runCtx, nil) })
		wg.Go(func() {
			if verifier.WaitReady(runCtx) == nil {
				log.Info("NAS's key set loaded", "keys", verifier.Health(runCtx).Keys, "after", time.Since(started).Round(time.Millisecond).String())
				agentState(false)
			}
		})
	} else {
		wg.Go(func() {
			if err := rt.RunTimer(runCtx); err != nil && runCtx.Err() == nil {
				log.Error("built-in timer stopped", "error", err)
			}
		})
	}

	idle := make(chan struct{})
	if o.idleExit > 0 {
		busy := func(ctx context.Context) string {
			switch {
			case srv.Active() > 0:
				return "requests in progress"
			case rt.InFlight() > 0:
				return "runs in flight"
			case rt.Unsaved() > 0:
				return "results not stored yet"
			case rec != nil && !rec.InSync():
				return "NAS is not in sync with the jobs yet"
			}
			if rec == nil {
				next, ok, err := rt.NextDue(ctx)
				if err != nil {
					return "cannot read the next due time: " + err.Error()
				}
				if ok && time.Until(next) < o.idleExit {
					return "a job is due within the idle period"
				}
			}
			return ""
		}
		wg.Go(func() {
			if activation.WaitIdle(runCtx, o.idleExit, activity, busy) == nil {
				close(idle)
			}
		})
	}

	var result error
	select {
	case <-ctx.Done():
		log.Info("agent stopping", "reason", "signal")
	case <-idle:
		log.Info("agent stopping", "reason", "idle", "idle_for", o.idleExit.String())
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			result = fmt.Errorf("agent: serve: %w", err)
			log.Error("agent stopping", "reason", "serve failed", "error", err)
		}
	}

	// Drain: new fires get 503 (NAS retries) and requests in progress
	// finish; the reconcile and timer loops stop (every claim already re-armed
	// its job); runs in progress get the drain timeout.
	srv.Drain()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	_ = httpSrv.Shutdown(shutdownCtx)
	cancel()
	stopRun()
	wg.Wait()
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.drain)
	if err := rt.Close(closeCtx); err != nil {
		log.Warn("closing the runtime", "error", err)
	}
	cancel()
	agentState(true)
	log.Info("agent stopped", "uptime", time.Since(started).Round(time.Millisecond).String())
	return result
}
