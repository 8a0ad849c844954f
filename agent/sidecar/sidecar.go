// Package sidecar runs the agent as a process: it assembles the runtime, the
// verifier of NAS's tokens, the NAS client and the reconciler (or the
// built-in timer), the fire server and its listener (a socket passed by
// systemd socket activation or the configured address), and runs them until
// the context ends or the agent has been idle long enough, telling the
// service manager when it is ready and stopping. It also gathers what
// `chronos agent status` reports about a home.
//
// The binary, the demo and the tests all start the agent through Run.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/activation"
	"github.com/chronoscron/chronos/agent/clockskew"
	"github.com/chronoscron/chronos/agent/fireauth"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/internal/systemd"
)

// Defaults of Options.
const (
	// DefaultDrainTimeout is how long runs in progress may finish at
	// shutdown before they are stopped and recorded interrupted.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultReadyTimeout bounds the wait for the first reconcile before
	// the service manager is told the agent is ready.
	DefaultReadyTimeout = 30 * time.Second
	// shutdownTimeout bounds the wait for requests in progress at shutdown.
	shutdownTimeout = 10 * time.Second
)

// Options configure Run.
type Options struct {
	// Config is the agent's config, loaded and validated (home, listen,
	// timezone, cron). Required.
	Config provider.Config
	// Decision is the provider in use and why; the zero value means
	// provider.Decide(Config).
	Decision provider.Decision
	// Logger receives the agent's logs; default slog.Default().
	Logger *slog.Logger
	// IdleExit makes Run return nil after this long with no request, no run
	// in flight and NAS in sync (under the built-in timer: also nothing due
	// within it), so systemd starts the agent again on the next fire. 0:
	// never; negative is an error.
	IdleExit time.Duration
	// DrainTimeout is how long runs in progress may finish at shutdown;
	// default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Listener, when set, is served instead of a socket passed through the
	// environment (socket activation) or a new one on Config.Listen. Run
	// closes it.
	Listener net.Listener
	// Notifier is told when the agent is ready and when it stops; default
	// the systemd notify protocol (nothing happens outside systemd).
	Notifier Notifier
	// ReadyTimeout bounds how long readiness waits for the first reconcile
	// with NAS; default DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// WrapVerifier, when set, wraps the verifier of fire tokens (the demo
	// reports each verified token). A wrapper should keep WaitReady.
	WrapVerifier func(agenthttp.FireVerifier) agenthttp.FireVerifier
	// ConfigPath names the config file the agent was started with; it is
	// recorded in the home (provider.RecordServing) so that job commands
	// given only the home find the agent that serves it. Empty: the agent
	// is configured by the environment alone, and no record is kept.
	ConfigPath string
	// PausedSweep is how often the slots that passed while a job was paused
	// are recorded skipped (reason paused); default DefaultPausedSweep.
	PausedSweep time.Duration
	// Now is the host's clock; default time.Now. The agent judges NAS's fire
	// tokens, fired slots and its schedule by NAS's clock as it estimates
	// it from this one (see package clockskew).
	Now func() time.Time
	// UIListener, when set, serves the local API and dashboard instead of
	// a new listener on Config.UIListen (even when that is off). Run
	// closes it.
	UIListener net.Listener
}

// DefaultPausedSweep is how often a running agent records the slots its
// paused jobs let pass.
const DefaultPausedSweep = time.Minute

// Notifier tells a service manager how the agent is doing.
type Notifier interface {
	// Ready is called once the listener serves and the first reconcile (or,
	// under the built-in timer, the first store check) is done. alive
	// reports whether the agent is healthy (its store can be written); a
	// watchdog is fed only while it returns nil, until ctx ends.
	Ready(ctx context.Context, log *slog.Logger, alive func(context.Context) error)
	// Stopping is called when the agent starts shutting down.
	Stopping(log *slog.Logger)
}

// Systemd is the Notifier of the systemd notify protocol (Type=notify,
// WatchdogSec); outside systemd it does nothing.
type Systemd struct{}

// Ready implements Notifier.
func (Systemd) Ready(ctx context.Context, log *slog.Logger, alive func(context.Context) error) {
	systemd.Ready(ctx, log, alive)
}

// Stopping implements Notifier.
func (Systemd) Stopping(log *slog.Logger) { systemd.Stopping(log) }

// sidecar is one running agent.
type sidecar struct {
	o        Options
	log      *slog.Logger
	started  time.Time
	ln       net.Listener
	rt       *agent.Runtime
	verifier *fireauth.JWTVerifier
	// fires verifies fire tokens: direct ones under the jobs' cron keys,
	// NAS's with verifier.
	fires  *fireauth.DirectVerifier
	skew   *clockskew.Estimator
	rec    *provider.Reconciler
	resync time.Duration
	srv    *agenthttp.Server
	ui     *localUI
	runCtx context.Context
	wg     sync.WaitGroup
}

// Run runs the agent on o.Config's home until ctx ends (nil), the agent has
// been idle for o.IdleExit (nil) or serving fails. At the end new fires are
// refused with 503, requests in progress finish, and runs in progress get
// the drain timeout before they are stopped and recorded interrupted.
func Run(ctx context.Context, o Options) error {
	o, loc, err := o.prepare()
	if err != nil {
		return err
	}
	s := &sidecar{o: o, log: o.Logger, started: time.Now(),
		skew: clockskew.New(clockskew.Options{Local: o.Now, Logger: o.Logger.With("component", "clock")})}
	// Accept connections as early as possible: a woken agent's first fire
	// is already waiting in the socket's backlog.
	activated, err := s.listen()
	if err != nil {
		return err
	}
	defer s.ln.Close()
	s.log.Info("agent starting", "provider", o.Decision.Provider, "why", o.Decision.Why(),
		"listen", s.ln.Addr().String(), "socket_activated", activated, "home", o.Config.Home, "idle_exit", o.IdleExit.String())
	secretfile.Warn(s.log, ExposedSecretFiles(o.Config)...)
	if s.rt, err = agent.Open(ctx, agent.Config{Home: o.Config.Home, Location: loc, Logger: s.log.With("component", "runtime"), Now: s.skew.Now, NotifyAddresses: o.Config.NotifyAddresses(), NotifyResolver: net.DefaultResolver, SQL: o.Config.SQLDatabases(), Chains: o.Config.ChainConfig(), MaxJobsFile: o.Config.JobsFileLimit()}); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	ui, err := s.startUI()
	if err != nil {
		_ = s.rt.Close(context.WithoutCancel(ctx))
		return err
	}
	s.ui = ui
	s.recordServing(ui)
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	s.runCtx = runCtx
	// Runs whose agent died (killed, crashed) are found and settled before
	// any fire is taken; if the store cannot be written now, again until it
	// can.
	recoverErr := s.rt.Recover(runCtx)
	if err := s.openProvider(); err != nil {
		s.ui.stop(context.WithoutCancel(ctx))
		s.recordServing(nil)
		_ = s.rt.Close(context.WithoutCancel(ctx))
		return err
	}
	if s.verifier != nil {
		defer s.verifier.Close()
	}
	if recoverErr != nil {
		s.log.Error("settling the runs of a dead agent failed; trying again", "error", recoverErr)
		s.wg.Go(s.recoverRuns)
	}
	return s.serve(ctx, stopRun)
}

// prepare checks o, fills in its defaults and creates the home.
func (o Options) prepare() (Options, *time.Location, error) {
	if o.IdleExit < 0 {
		return o, nil, errors.New("agent: the idle exit period must not be negative")
	}
	loc, err := o.Config.Location()
	if err != nil {
		return o, nil, fmt.Errorf("agent: %w", err)
	}
	if err := o.Config.ValidateUI(); err != nil {
		return o, nil, fmt.Errorf("agent: %w", err)
	}
	if o.Decision.Provider == "" {
		o.Decision = provider.Decide(o.Config)
	}
	if err := o.Decision.Err(); err != nil {
		return o, nil, fmt.Errorf("agent: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.Notifier == nil {
		o.Notifier = Systemd{}
	}
	if err := os.MkdirAll(o.Config.Home, 0o700); err != nil {
		return o, nil, fmt.Errorf("agent: home: %w", err)
	}
	return o, loc, nil
}

// listen sets s.ln: the given listener, the socket passed by systemd, or a
// new one on the configured address. It reports whether the socket was
// passed.
func (s *sidecar) listen() (bool, error) {
	if s.o.Listener != nil {
		s.ln = s.o.Listener
		return false, nil
	}
	ln, err := activation.FromEnv()
	if err != nil {
		return false, fmt.Errorf("agent: %w", err)
	}
	if ln != nil {
		s.ln = ln
		return true, nil
	}
	if s.ln, err = net.Listen("tcp", s.o.Config.Listen); err != nil {
		return false, fmt.Errorf("agent: listen: %w", err)
	}
	return false, nil
}

// openProvider sets up the verifier, the NAS client and the reconciler when
// the chronos provider is in use, and says why not otherwise.
func (s *sidecar) openProvider() error {
	if !s.o.Decision.Chronos() {
		for _, r := range s.o.Decision.Reasons {
			s.log.Warn("chronos provider not in use", "reason", r)
		}
		return nil
	}
	ch := s.o.Config.Cron.Chronos
	resync, err := ch.Resync()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	delivery, err := ch.DeliveryMode()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	nc, err := newNASClient(ch, s.log.With("component", "nasclient"), 0, s.skew)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{
		Source: s.rt, NAS: nc, CallbackURL: ch.CallbackURL, Home: s.o.Config.Home, By: "agent", CatchUp: true,
		ResyncInterval: resync, Logger: s.log.With("component", "reconcile"), Now: s.skew.Now, Delivery: delivery,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	vcfg := fireauth.Config{
		JWKSURL: ch.NASJWKSURL, Issuer: ch.ExpectedIssuer(), Audience: ch.ExpectedAudience,
		Logger: s.log.With("component", "fireauth"), Now: s.skew.Now, Issued: s.skew,
	}
	verifier, err := fireauth.New(s.runCtx, vcfg)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	// Direct tokens are told apart in the same handler whatever the mode:
	// an agent that went back to mediated delivery still verifies the
	// slots armed under a key, and refuses NAS's tokens for direct jobs.
	fires, err := fireauth.NewDirect(verifier, rec.Keys(), vcfg)
	if err != nil {
		verifier.Close()
		return fmt.Errorf("agent: %w", err)
	}
	if delivery == contract.DeliveryDirect {
		s.log.Info("direct delivery asked for: NAS's provision answers carry each job's cron key", "keys", rec.Keys().Path())
	}
	s.verifier, s.fires, s.rec, s.resync = verifier, fires, rec, resync
	return nil
}

// handler builds the fire server: fires, reconcile requests, health,
// readiness and metrics.
func (s *sidecar) handler() *agenthttp.Server {
	hcfg := agenthttp.Config{Firer: s.rt, Logger: s.log.With("component", "http")}
	if s.rec != nil {
		hcfg.Sync = s.rec
		hcfg.ClockSkew = s.skew
		// Readiness fails once the agent has been out of sync for longer
		// than the timer that would have healed it.
		hcfg.ResyncInterval = s.resync
	}
	if v := s.verifier; v != nil {
		hcfg.Verifier = s.fires
		if s.o.WrapVerifier != nil {
			hcfg.Verifier = s.o.WrapVerifier(s.fires)
		}
		hcfg.ReconcileVerifier = v
		hcfg.Reconcile = func(reason string) {
			if reason == contract.ReconcileReasonRekey {
				s.rec.Rekey()
				return
			}
			s.rec.Resync()
		}
		hcfg.Checks = map[string]agenthttp.Check{"jwks": func(context.Context) error {
			if !v.Ready() {
				return errors.New("NAS's key set is not loaded yet")
			}
			return nil
		}}
	}
	return agenthttp.New(hcfg)
}

// serve serves until the agent stops, then drains and closes it.
func (s *sidecar) serve(ctx context.Context, stopRun context.CancelFunc) error {
	s.srv = s.handler()
	httpSrv := agenthttp.NewHTTPServer(s.srv)
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(s.ln) }()
	s.saveState(nil)
	activity := s.fanOut()
	s.startLoops()
	idle := s.startIdle(activity)
	s.wg.Go(s.ready)

	var result error
	select {
	case <-ctx.Done():
		s.log.Info("agent stopping", "reason", "signal")
	case <-idle:
		s.log.Info("agent stopping", "reason", "idle", "idle_for", s.o.IdleExit.String())
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			result = fmt.Errorf("agent: serve: %w", err)
			s.log.Error("agent stopping", "reason", "serve failed", "error", err)
		}
	}
	s.o.Notifier.Stopping(s.log)

	// Drain: new fires get 503 (NAS retries) and requests in progress
	// finish; the reconcile and timer loops stop (every claim already
	// re-armed its job); runs in progress get the drain timeout.
	s.srv.Drain()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	_ = httpSrv.Shutdown(shutdownCtx)
	if s.ui != nil {
		s.recordServing(nil) // commands take the direct path from now on
		s.ui.stop(shutdownCtx)
	}
	cancel()
	stopRun()
	s.wg.Wait()
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.DrainTimeout)
	if err := s.rt.Close(closeCtx); err != nil {
		s.log.Warn("closing the runtime", "error", err)
	}
	cancel()
	now := time.Now()
	s.saveState(&now)
	s.log.Info("agent stopped", "uptime", time.Since(s.started).Round(time.Millisecond).String())
	return result
}
