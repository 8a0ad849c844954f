package agenthttp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

// Fire outcomes: the outcome label of chronos_agent_fires_total, one per
// answer of POST /api/cron/fire.
const (
	OutcomeAccepted     = "accepted"     // 202: the slot is claimed (or consumed by a policy)
	OutcomeDuplicate    = "duplicate"    // 200: the slot was claimed already or has passed
	OutcomeGone         = "gone"         // 200: no such job
	OutcomeRefreshed    = "refreshed"    // 200: a refresh point of a far slot; armed again, nothing run
	OutcomeTooEarly     = "too_early"    // 425: the slot, or the token's nbf/iat, is ahead of the clock beyond the allowed skew
	OutcomeUnauthorized = "unauthorized" // 401: no token, or a token that fails verification
	OutcomeUnavailable  = "unavailable"  // 503: keys loading, unknown kid, store busy, draining, job paused
	OutcomeInvalid      = "invalid"      // 4xx: a malformed request (method, media type, size, body)
	OutcomeError        = "error"        // 500: the claim failed
)

var fireOutcomes = []string{OutcomeAccepted, OutcomeDuplicate, OutcomeGone, OutcomeRefreshed, OutcomeTooEarly,
	OutcomeUnauthorized, OutcomeUnavailable, OutcomeInvalid, OutcomeError}

// runStatuses are the statuses of chronos_agent_runs_total: the ledger
// states that end a run. duplicate lines are fire answers, counted by
// chronos_agent_fires_total instead.
var runStatuses = []ledger.State{ledger.StateSucceeded, ledger.StateFailed, ledger.StateInterrupted,
	ledger.StateSkipped, ledger.StateMissed, ledger.StatePartial, ledger.StateCancelled}

// SyncSource is the reconciler keeping NAS's armed fires equal to the jobs
// (*provider.Reconciler implements it). It is read at scrape and readiness
// time.
type SyncSource interface {
	// InSync reports whether NAS holds what the agent wants.
	InSync() bool
	// Failures counts this process's failed reconciles.
	Failures() int64
}

// StoreProbe tells whether the agent's store can be written now.
type StoreProbe interface {
	// Writable returns nil when a write would succeed, else why not.
	Writable(ctx context.Context) error
}

// JobsProbe tells whether the agent's jobs can be read from disk;
// *agent.Runtime implements it.
type JobsProbe interface {
	// JobsReadable returns nil when jobs.json (and what follows it) can be
	// read, else why not, in words fit for a public answer (no paths).
	JobsReadable(ctx context.Context) error
}

var _ JobsProbe = (*agent.Runtime)(nil)

// keyHealth is implemented by verifiers that fetch NAS's key set
// (*fireauth.JWTVerifier).
type keyHealth interface {
	Health(ctx context.Context) fireauth.Health
}

// ledgerOwner is implemented by firers that write a run ledger
// (*agent.Runtime); their runs are counted as the ledger records them.
type ledgerOwner interface {
	Ledger() *ledger.Ledger
}

// runtimeStore is the StoreProbe of an *agent.Runtime: it fails while a
// finished run's result or a ledger line is held in memory because writing
// it failed, and otherwise probes the runtime's home and ledger directory.
type runtimeStore struct {
	rt  *agent.Runtime
	dir DirProbe
}

// Writable implements StoreProbe.
func (p runtimeStore) Writable(ctx context.Context) error {
	if n := p.rt.Unsaved(); n > 0 {
		return fmt.Errorf("%d finished run result(s) or ledger line(s) not stored yet, held in memory until the store can be written", n)
	}
	return p.dir.Writable(ctx)
}

// DirProbe is a StoreProbe that creates, writes, syncs and removes a small
// file in each of Dirs: it fails on a read-only file system, a full disk, a
// directory the process may not write, or a path that is no directory.
type DirProbe struct {
	Dirs []string
}

// Writable implements StoreProbe.
func (p DirProbe) Writable(ctx context.Context) error {
	for _, dir := range p.Dirs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := atomicfile.Probe(dir); err != nil {
			return err
		}
	}
	return nil
}

// probeEvery bounds how often the store probe really runs: /readyz and
// /metrics are served on the public fire listener, and calling them must
// not become a way to make the agent write to its disk at will.
const probeEvery = time.Second

// metrics are the agent's Prometheus metrics, in a registry of their own.
type metrics struct {
	registry *prometheus.Registry
	fires    *prometheus.CounterVec
	runs     *prometheus.CounterVec
	notices  *prometheus.CounterVec
}

// noticeResults are the results of chronos_agent_notifications_total: the
// ledger states of a notification line.
var noticeResults = []ledger.State{ledger.StateSent, ledger.StateDead}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chronos_agent_fires_total",
			Help: "Answers of POST /api/cron/fire by outcome: accepted, duplicate, gone, too_early, unauthorized, unavailable, invalid, error.",
		}, []string{"outcome"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chronos_agent_runs_total",
			Help: "Runs this process recorded as ended in the ledger, by status: succeeded, failed, interrupted, skipped, missed, partial, cancelled.",
		}, []string{"status"}),
		notices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chronos_agent_notifications_total",
			Help: "Notifications of runs this process finished, by result: sent (delivered) or dead (given up on).",
		}, []string{"result"}),
	}
	for _, o := range fireOutcomes {
		m.fires.WithLabelValues(o)
	}
	for _, st := range runStatuses {
		m.runs.WithLabelValues(string(st))
	}
	for _, st := range noticeResults {
		m.notices.WithLabelValues(string(st))
	}
	m.registry.MustRegister(m.fires, m.runs, m.notices, &stateCollector{s: s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observeLedger counts the ledger lines that end a run or a notification.
func (m *metrics) observeLedger(e ledger.Entry) {
	if e.Kind == ledger.KindNotification {
		if e.State == ledger.StateSent || e.State == ledger.StateDead {
			m.notices.WithLabelValues(string(e.State)).Inc()
		}
		return
	}
	if e.Kind != "" || e.Discarded || e.State == ledger.StateDuplicate || !e.State.Terminal() {
		return
	}
	m.runs.WithLabelValues(string(e.State)).Inc()
}

var (
	descReconcileErrors = prometheus.NewDesc("chronos_agent_reconcile_errors_total",
		"Reconciles with NAS that failed in this process (present with the chronos provider).", nil, nil)
	descInSync = prometheus.NewDesc("chronos_agent_in_sync",
		"1 when NAS holds the fires the agent wants armed, else 0 (present with the chronos provider).", nil, nil)
	descJWKSAge = prometheus.NewDesc("chronos_agent_jwks_age_seconds",
		"Seconds since NAS's key set in use was fetched (present once it is loaded).", nil, nil)
	descJWKSFetches = prometheus.NewDesc("chronos_agent_jwks_fetches_total",
		"Fetches of NAS's key set by trigger (load, periodic, unknown_kid) and result (ok, failed).", []string{"trigger", "result"}, nil)
	descStoreWritable = prometheus.NewDesc("chronos_agent_store_writable",
		"1 when the agent's home (jobs, ledger) can be written, else 0.", nil, nil)
	descClockSkew = prometheus.NewDesc("chronos_agent_clock_skew_seconds",
		"NAS's clock minus the host's as the agent estimates it: positive when the host's clock is behind (present with the chronos provider).", nil, nil)
)

// stateCollector reads what the reconciler, the verifier and the store
// probe know at scrape time.
type stateCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append([]*prometheus.Desc{descReconcileErrors, descInSync, descJWKSAge, descJWKSFetches, descStoreWritable, descClockSkew}, chainDescs...) {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.cfg.Sync != nil {
		inSync := 0.0
		if in, _ := s.syncState(); in {
			inSync = 1
		}
		ch <- prometheus.MustNewConstMetric(descReconcileErrors, prometheus.CounterValue, float64(s.cfg.Sync.Failures()))
		ch <- prometheus.MustNewConstMetric(descInSync, prometheus.GaugeValue, inSync)
	}
	if kh, ok := s.cfg.Verifier.(keyHealth); ok {
		h := kh.Health(ctx)
		if h.Loaded {
			ch <- prometheus.MustNewConstMetric(descJWKSAge, prometheus.GaugeValue, max(s.cfg.Now().Sub(h.FetchedAt).Seconds(), 0))
		}
		for _, trigger := range []string{fireauth.TriggerLoad, fireauth.TriggerPeriodic, fireauth.TriggerUnknownKID} {
			n := h.Fetches[trigger]
			ch <- prometheus.MustNewConstMetric(descJWKSFetches, prometheus.CounterValue, float64(n.OK), trigger, "ok")
			ch <- prometheus.MustNewConstMetric(descJWKSFetches, prometheus.CounterValue, float64(n.Failed), trigger, "failed")
		}
	}
	if cs, ok := s.cfg.Firer.(chainSource); ok {
		collectChains(ctx, cs, ch)
	}
	if s.cfg.Store != nil {
		ch <- prometheus.MustNewConstMetric(descStoreWritable, prometheus.GaugeValue, up(s.storeWritable(ctx)))
	}
	if s.cfg.ClockSkew != nil {
		ch <- prometheus.MustNewConstMetric(descClockSkew, prometheus.GaugeValue, s.cfg.ClockSkew.Seconds())
	}
}

// up is a gauge's value for a check: 1 when it passed, 0 when it failed.
func up(err error) float64 {
	if err != nil {
		return 0
	}
	return 1
}

// StoreWritable reports whether the agent's store can be written, as
// /readyz and /metrics do: nil when it can or when no store probe is
// configured. The probe runs at most once a second; calls in between return
// its last result.
func (s *Server) StoreWritable(ctx context.Context) error {
	if s.cfg.Store == nil {
		return nil
	}
	return s.storeWritable(ctx)
}

// storeWritable runs the store probe at most once per probeEvery and
// returns its last result.
func (s *Server) storeWritable(ctx context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	now := s.cfg.Now()
	if age := now.Sub(s.probedAt); !s.probedAt.IsZero() && age >= 0 && age < probeEvery {
		return s.probeErr
	}
	err := s.cfg.Store.Writable(ctx)
	if err != nil && s.probeErr == nil {
		s.cfg.Logger.Error("the agent's store is not writable", "error", err)
	} else if err == nil && s.probeErr != nil {
		s.cfg.Logger.Info("the agent's store is writable again")
	}
	s.probedAt, s.probeErr = now, err
	return err
}

// publicProbeError is what /readyz says about a failed probe: the cause
// without the path, since the route is served on the public listener.
func publicProbeError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return "not writable: " + pe.Err.Error()
	}
	if strings.Contains(err.Error(), "held in memory") {
		return "not writable: " + err.Error()
	}
	return "not writable"
}

// syncWatch remembers since when the agent has been out of sync with NAS,
// as observed: the server reads SyncSource when it starts, on every request
// and on every scrape, so the clock starts at the first observation that
// finds the agent out of sync (within a request or a probe of the moment
// it went out of sync) and stops at the first that finds it in sync.
type syncWatch struct {
	mu    sync.Mutex
	since time.Time // zero while in sync
}

// syncState reads the reconciler and returns whether it is in sync and, if
// not, since when (as observed).
func (s *Server) syncState() (bool, time.Time) {
	in := s.cfg.Sync.InSync()
	now := s.cfg.Now()
	w := &s.sync
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case in:
		w.since = time.Time{}
	case w.since.IsZero():
		w.since = now
	}
	return in, w.since
}
