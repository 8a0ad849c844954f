package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
)

func init() { afterJobChange = reconcileAfterJobChange }

// cliReconcileTimeout bounds the reconcile a job change makes from the CLI.
const cliReconcileTimeout = 30 * time.Second

// reconcileAfterJobChange arms a job change made by the jobs CLI at NAS, so
// that jobs added while the agent is stopped are armed at once. It does
// nothing unless $CHRONOS_AGENT_CONFIG names a config whose provider is
// chronos. It never runs jobs: overdue slots are left to the agent's next
// start. A failure is reported but the change itself is already saved; the
// agent heals it on its next reconcile.
func reconcileAfterJobChange(ctx context.Context, home string) error {
	path, ok := os.LookupEnv(envAgentConfig)
	if !ok || path == "" {
		return nil
	}
	cfg, decision, err := loadAgentConfig(path, os.LookupEnv)
	if err != nil {
		return fmt.Errorf("arming at NAS: %w", err)
	}
	if !decision.Chronos() {
		return nil
	}
	if home != "" && !sameDir(home, cfg.Home) {
		// The change is in another home than the agent's: not its jobs.
		return nil
	}
	loc, err := cfg.Location()
	if err != nil {
		return fmt.Errorf("arming at NAS: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cliReconcileTimeout)
	defer cancel()
	rt, err := agent.Open(ctx, agent.Config{Home: cfg.Home, Location: loc})
	if err != nil {
		return fmt.Errorf("arming at NAS: %w", err)
	}
	defer func() { _ = rt.Close(context.WithoutCancel(ctx)) }()
	ch := cfg.Cron.Chronos
	quiet := slog.New(slog.DiscardHandler)
	nc, err := nasclient.New(nasclient.Config{PortalURL: ch.PortalURL, AccessToken: ch.AccessToken, Logger: quiet})
	if err != nil {
		return fmt.Errorf("arming at NAS: %w", err)
	}
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{
		Source: rt, NAS: nc, CallbackURL: ch.CallbackURL, Home: cfg.Home, By: "cli", Logger: quiet,
	})
	if err != nil {
		return fmt.Errorf("arming at NAS: %w", err)
	}
	if _, err := rec.Reconcile(ctx); err != nil {
		return fmt.Errorf("the change is saved, but arming it at NAS failed (the agent retries when it runs): %w", err)
	}
	return nil
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	if errA == nil && errB == nil && absA == absB {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}
