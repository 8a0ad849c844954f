package provider

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/nasclient"
)

// Environment variables a job command reads to find its home.
const (
	// EnvConfig names the agent config file.
	EnvConfig = "CHRONOS_AGENT_CONFIG"
	// EnvHome names the agent's home directory.
	EnvHome = "CHRONOS_HOME"
)

// Loader loads an agent config: the file at path (path empty: the file named
// by EnvConfig, if any), with the environment of lookup applied on top.
type Loader func(path string, lookup func(string) (string, bool)) (Config, Decision, error)

// TargetOptions says how to find the home a job command acts on.
type TargetOptions struct {
	// Home is the home given on the command line (--home); empty if none.
	Home string
	// Lookup reads the environment (os.LookupEnv).
	Lookup func(string) (string, bool)
	// Load loads an agent config. Required.
	Load Loader
}

// Target is the home a job command acts on, the zone of jobs that name none,
// and the config of the agent that serves the home, when one is known.
type Target struct {
	// Home is the home directory.
	Home string
	// Location is the zone of jobs that name none: the serving agent's
	// timezone, else $CHRONOS_TIMEZONE, else UTC.
	Location *time.Location
	// ConfigPath names the serving agent's config ("" when none is known);
	// Config and Decision are that config and its provider.
	ConfigPath string
	Config     Config
	Decision   Decision
}

// ResolveTarget finds the home: o.Home, else $CHRONOS_HOME, else the home of
// the config named by $CHRONOS_AGENT_CONFIG, else ~/.chronos. The serving
// agent's config is $CHRONOS_AGENT_CONFIG when its home is that home, else
// the config recorded in the home's ServingFile when that config still names
// the home. A config for another home names another agent, not this one's,
// and is not used.
func ResolveTarget(o TargetOptions) (Target, error) {
	lookup := o.Lookup
	envPath, _ := lookup(EnvConfig)
	cfg, dec, err := o.Load("", lookup)
	if err != nil {
		return Target{}, err
	}
	if o.Home != "" {
		if !SameDir(o.Home, cfg.Home) {
			envPath = ""
			lookup = hideEnv(lookup, EnvConfig)
		}
		if cfg, dec, err = o.Load("", withEnv(lookup, EnvHome, o.Home)); err != nil {
			return Target{}, err
		}
	}
	t := Target{Home: cfg.Home, Config: cfg, Decision: dec, ConfigPath: envPath}
	if t.ConfigPath == "" {
		// The record's config is read as its agent reads it: without
		// --home standing in for its home.
		t.useRecord(o.Load, o.Lookup)
	}
	if t.Location, err = t.Config.Location(); err != nil {
		return Target{}, err
	}
	return t, nil
}

// useRecord makes the config recorded in the home's ServingFile the
// target's, when it exists, loads and still serves the home.
func (t *Target) useRecord(load Loader, lookup func(string) (string, bool)) {
	rec, ok, err := ReadServing(t.Home)
	if err != nil || !ok || rec.Config == "" {
		return
	}
	cfg, dec, err := load(rec.Config, hideEnv(lookup, EnvConfig))
	if err != nil || !SameDir(cfg.Home, t.Home) {
		return
	}
	t.ConfigPath, t.Config, t.Decision = rec.Config, cfg, dec
}

// hideEnv returns lookup without the variable name.
func hideEnv(lookup func(string) (string, bool), name string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == name {
			return "", false
		}
		return lookup(k)
	}
}

// withEnv returns lookup with the variable name set to value.
func withEnv(lookup func(string) (string, bool), name, value string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == name {
			return value, true
		}
		return lookup(k)
	}
}

// SameDir reports whether a and b name the same directory.
func SameDir(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	if errA == nil && errB == nil && absA == absB {
		return true // also for a home not created yet, named relatively
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// Arming says how a saved job change reaches the agent that serves its home.
type Arming int

// Armings.
const (
	// ArmNone: no agent config is known for the home; nothing arms the
	// change until the agent next starts.
	ArmNone Arming = iota
	// ArmTimer: the serving agent uses its built-in timer; it sees the
	// change when it runs.
	ArmTimer
	// ArmedAtNAS: the change was armed at NAS through the serving agent's
	// config.
	ArmedAtNAS
	// ArmRunning: no config is known, but the agent serving the home runs;
	// it sees the change within a second and arms it.
	ArmRunning
)

// ArmReport is the outcome of ArmChange.
type ArmReport struct {
	// How says how the change was armed; Config names the serving agent's
	// config.
	How    Arming
	Config string
	// Armed is the armed set after the reconcile (ArmedAtNAS only).
	Armed []Arm
	// PID is the running agent's process (ArmRunning only).
	PID int
}

// ArmFor returns the fire armed for job id, if any.
func (r ArmReport) ArmFor(id string) (Arm, bool) {
	for _, a := range r.Armed {
		if a.JobID == id {
			return a, true
		}
	}
	return Arm{}, false
}

// ArmTimeout bounds the reconcile ArmChange makes.
const ArmTimeout = 30 * time.Second

// ArmChange arms a saved job change of rt's home at NAS through the agent
// that serves it (t), so that a change made while the agent is stopped (under
// socket activation) is armed at once. It never runs jobs: overdue slots are
// left to the agent's next start. An error means the change is saved but not
// armed; the agent heals it on its next reconcile.
func ArmChange(ctx context.Context, t Target, rt *agent.Runtime) (ArmReport, error) {
	rep := ArmReport{Config: t.ConfigPath}
	if t.ConfigPath == "" {
		if st, err := ReadState(t.Home); err == nil && st.Agent != nil && st.Agent.StoppedAt == nil && procfs.Alive(st.Agent.PID) {
			rep.How, rep.PID = ArmRunning, st.Agent.PID
		}
		return rep, nil
	}
	if !t.Decision.Chronos() {
		rep.How = ArmTimer
		return rep, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ArmTimeout)
	defer cancel()
	ch := t.Config.Cron.Chronos
	quiet := slog.New(slog.DiscardHandler)
	delivery, err := ch.DeliveryMode()
	if err != nil {
		return rep, fmt.Errorf("arming at NAS: %w", err)
	}
	nc, err := nasclient.New(nasclient.Config{PortalURL: ch.PortalURL, AccessToken: ch.AccessToken, Logger: quiet, Delivery: delivery})
	if err != nil {
		return rep, fmt.Errorf("arming at NAS: %w", err)
	}
	rec, err := NewReconciler(ReconcilerConfig{
		Source: rt, NAS: nc, CallbackURL: ch.CallbackURL, Home: t.Home, By: "cli", Logger: quiet, Delivery: delivery,
	})
	if err != nil {
		return rep, fmt.Errorf("arming at NAS: %w", err)
	}
	if _, err := rec.Reconcile(ctx); err != nil {
		return rep, fmt.Errorf("the change is saved, but arming it at NAS failed (the agent retries when it runs): %w", err)
	}
	st, err := ReadState(t.Home)
	if err != nil {
		return rep, err
	}
	rep.How, rep.Armed = ArmedAtNAS, st.Armed
	return rep, nil
}

// Describe says in one line how a change of home was armed; j is the changed
// job (nil when it was removed).
func (r ArmReport) Describe(home string, j *job.Job) string {
	switch r.How {
	case ArmNone:
		return fmt.Sprintf("NAS not told: no agent config is known for home %s, so nothing will arm this change until the agent next starts (start it with --config, or set %s)", home, EnvConfig)
	case ArmTimer:
		return "the agent of " + r.Config + " uses its built-in timer: it takes the change when it runs"
	case ArmRunning:
		return fmt.Sprintf("the agent serving home %s (pid %d) runs: it takes the change within a second", home, r.PID)
	}
	via := "through the agent of " + r.Config
	if j == nil || j.NextRunAt == nil {
		return "NAS updated " + via
	}
	a, ok := r.ArmFor(j.ID)
	switch {
	case !ok:
		return "NOT armed at NAS " + via + " (see chronos agent status)"
	case a.FireAt.Before(*j.NextRunAt):
		return fmt.Sprintf("armed at NAS %s: the fire at %s is beyond NAS's horizon, so it is armed through a refresh fire at %s that re-arms it nearer to the slot",
			via, agent.JobTime(j, j.NextRunAt), agent.JobTime(j, &a.FireAt))
	}
	return fmt.Sprintf("armed at NAS %s for %s", via, agent.JobTime(j, &a.FireAt))
}
