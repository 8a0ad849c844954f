// Package agenthttp serves the agent's HTTP surface: POST /api/cron/fire
// (hop 3 of the contract), /healthz, /readyz and /metrics.
//
// A fire is answered only after its slot is claimed: the bearer token is
// verified against the exact body (FireVerifier), the body is decoded
// strictly, and the runtime's compare-and-set claim decides the answer:
// 202 accepted with the run id, 200 duplicate, 200 gone, 425 too_early with
// Retry-After when the slot, or the token's nbf or iat, is further ahead of
// the agent's clock than the allowed skew, or 503 with Retry-After when the
// slot cannot be claimed now
// (store busy, draining, keys not loaded, a kid not in the key set yet). The
// run itself happens after the answer. A token that fails verification is
// 401 and nothing runs; a body without job_id is 400.
//
// /readyz fails while the key set is not loaded (a check the caller passes),
// while the store is not writable, while jobs.json on disk does not parse or
// is over its limit (the agent then works from its last good jobs), and while the agent has been out of sync
// with NAS for longer than the resync interval. /metrics serves the agent's
// Prometheus metrics (see metrics.go for the names).
package agenthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/contract"
)

// FireVerifier decides whether a fire may proceed. token is the bearer
// token, body the exact request bytes and req their decoded form. It returns
// nil to let the fire through. A *contract.Error with status 503 (for
// example while keys are loading) or 425 (a token only not valid yet) is
// answered as is, so NAS retries; any other error is answered 401
// invalid_token (with the *contract.Error's description when it is one)
// and nothing runs.
type FireVerifier interface {
	VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error
}

// ReconcileVerifier decides whether a reconcile request may proceed, as
// FireVerifier does for fires; *fireauth.JWTVerifier implements it.
type ReconcileVerifier interface {
	VerifyReconcile(ctx context.Context, token string, body []byte) error
}

// SkewSource reports NAS's clock minus the host's, in seconds.
type SkewSource interface {
	Seconds() float64
}

// Firer claims slots; *agent.Runtime implements it.
type Firer interface {
	Fire(ctx context.Context, jobID string, slot time.Time, trigger agent.Trigger) (agent.FireResult, error)
}

var _ Firer = (*agent.Runtime)(nil)

// readyWaiter is implemented by verifiers whose keys load in the background.
type readyWaiter interface {
	WaitReady(ctx context.Context) error
}

// tokenReadyWaiter is implemented by verifiers that know, from the token,
// whether it needs the keys loading in the background
// (*fireauth.DirectVerifier: a direct token needs none of NAS's).
type tokenReadyWaiter interface {
	WaitReadyFor(ctx context.Context, token string) error
}

// Check is one readiness check: nil when ready, else why not.
type Check func(ctx context.Context) error

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 16 << 10
	DefaultReadyWait    = 5 * time.Second
	// DefaultResyncInterval is the default of Config.ResyncInterval, the
	// default of cron.chronos.resync_interval.
	DefaultResyncInterval = 5 * time.Minute
	defaultBusyRetry      = time.Second
	drainingRetry         = 5 * time.Second
	noProviderRetry       = time.Minute
)

// Config configures a Server.
type Config struct {
	// Firer claims slots. Required.
	Firer Firer
	// Verifier checks fire tokens. Nil means the chronos provider is not in
	// use: fires are answered 503.
	Verifier FireVerifier
	// Checks are the readiness checks by name (e.g. "jwks"); /readyz is 200
	// when all pass and the server is not draining.
	Checks map[string]Check
	// Reconcile, when set, serves POST /api/cron/reconcile: a request whose
	// cron_reconcile token ReconcileVerifier accepts is answered 202 and
	// handed to Reconcile. Without it the route answers 503.
	Reconcile         func(reason string)
	ReconcileVerifier ReconcileVerifier
	// ReadyWait is how long a fire waits for a verifier that is still
	// loading its keys (a woken agent's first fire) before answering 503;
	// default 5 s.
	ReadyWait time.Duration
	// MaxBodyBytes caps a fire body; default 16 KiB.
	MaxBodyBytes int64
	// Sync is the reconciler keeping NAS's armed fires in step with the
	// jobs (*provider.Reconciler); nil when the chronos provider is not in
	// use. /readyz fails ("sync") once it has been out of sync for longer
	// than ResyncInterval; /metrics reports it.
	Sync SyncSource
	// ResyncInterval is how long the agent may stay out of sync with NAS
	// before /readyz fails: cron.chronos.resync_interval, default 5 min.
	ResyncInterval time.Duration
	// Store probes that the agent's store can be written; /readyz fails
	// ("store") while it cannot, and /metrics reports it. Default: when
	// Firer is an *agent.Runtime, the runtime's own StoreWritable (results
	// held in memory because a write failed, and a probe of its home and ledger)
	// directories.
	Store StoreProbe
	// Jobs tells whether the agent's jobs can be read from disk; /readyz
	// fails ("jobs") while jobs.json does not parse or is over its limit,
	// with the reason. Default: the Firer, when it is a JobsProbe (as
	// *agent.Runtime is).
	Jobs JobsProbe
	// Now is the clock of the readiness and metrics checks; default time.Now.
	Now func() time.Time
	// ClockSkew, when set, is the estimate of NAS's clock against the
	// host's (*clockskew.Estimator); /metrics reports it as
	// chronos_agent_clock_skew_seconds.
	ClockSkew SkewSource
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Server is the agent's HTTP handler. It counts requests in progress and
// signals each finished one, for idle-exit decisions.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	metrics  *metrics
	draining atomic.Bool
	active   atomic.Int64
	activity chan struct{}

	sync     syncWatch
	rejected rejectLog // samples the lines of refused tokens
	probeMu  sync.Mutex
	probedAt time.Time
	probeErr error
}

// New returns a server for cfg. When cfg.Firer writes a run ledger (as
// *agent.Runtime does), the runs it records are counted from then on.
func New(cfg Config) *Server {
	if cfg.ReadyWait <= 0 {
		cfg.ReadyWait = DefaultReadyWait
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if rt, ok := cfg.Firer.(*agent.Runtime); ok && cfg.Store == nil && rt != nil {
		cfg.Store = runtimeStore{rt: rt, dir: DirProbe{Dirs: []string{rt.Store().Home(), rt.Ledger().Dir()}}}
	}
	if jp, ok := cfg.Firer.(JobsProbe); ok && cfg.Jobs == nil && jp != nil {
		cfg.Jobs = jp
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), activity: make(chan struct{}, 1)}
	s.metrics = newMetrics(s)
	if lo, ok := cfg.Firer.(ledgerOwner); ok {
		lo.Ledger().Observe(s.metrics.observeLedger)
	}
	if cfg.Sync != nil {
		s.syncState() // the out-of-sync clock starts now at the latest
	}
	metricsHandler := promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)})
	s.mux.HandleFunc(contract.PathFire, s.fire)
	s.mux.HandleFunc(contract.PathReconcile, s.reconcile)
	s.mux.HandleFunc(contract.PathHealthz, s.healthz)
	s.mux.HandleFunc(contract.PathReadyz, s.readyz)
	s.mux.HandleFunc(contract.PathMetrics, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r, http.MethodGet)
			return
		}
		metricsHandler.ServeHTTP(w, r)
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		contract.WriteError(w, contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no route %s", r.URL.Path))
	})
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	if s.cfg.Sync != nil {
		s.syncState()
	}
	defer func() {
		s.active.Add(-1)
		select {
		case s.activity <- struct{}{}:
		default:
		}
	}()
	s.mux.ServeHTTP(w, r)
}

// Active returns the number of requests in progress.
func (s *Server) Active() int { return int(s.active.Load()) }

// Activity is signalled (coalesced) after every request.
func (s *Server) Activity() <-chan struct{} { return s.activity }

// Drain makes new fires answer 503 with Retry-After and /readyz fail; use it
// before shutting down.
func (s *Server) Drain() { s.draining.Store(true) }

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	contract.WriteError(w, contract.Errorf(http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed, "%s is not allowed here; use %s", r.Method, allow))
}

func unavailable(retry time.Duration, format string, args ...any) *contract.Error {
	e := contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, format, args...)
	e.RetryAfter = retry
	return e
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	return contract.BearerToken(r.Header.Get(contract.HeaderAuthorization))
}

// fire answers NAS's POST /api/cron/fire: checks the request, verifies the
// token and claims the slot, counting the outcome.
func (s *Server) fire(w http.ResponseWriter, r *http.Request) {
	outcome := s.serveFire(w, r)
	s.metrics.fires.WithLabelValues(outcome).Inc()
}

// serveFire handles one fire and returns its outcome label.
func (s *Server) serveFire(w http.ResponseWriter, r *http.Request) string {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, http.MethodPost)
		return OutcomeInvalid
	}
	if s.draining.Load() {
		contract.WriteError(w, unavailable(drainingRetry, "the agent is shutting down"))
		return OutcomeUnavailable
	}
	token, ok := bearer(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_request"`)
		contract.WriteError(w, contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "missing bearer token"))
		return OutcomeUnauthorized
	}
	if s.cfg.Verifier == nil {
		contract.WriteError(w, unavailable(noProviderRetry, "the chronos provider is not in use on this agent"))
		return OutcomeUnavailable
	}
	body, req, e := s.readFireRequest(w, r)
	if e != nil {
		contract.WriteError(w, e)
		return OutcomeInvalid
	}
	log := s.cfg.Logger.With("job_id", req.JobID, "fire_at", req.FireAt.String(), "schedule_id", req.ScheduleID, "attempt", req.Attempt)
	if outcome, ok := s.verifyFire(w, r, log, fireToken{token: token, body: body, req: req}); !ok {
		return outcome
	}
	res, err := s.cfg.Firer.Fire(r.Context(), req.JobID, req.FireAt.Time, agent.TriggerScheduled)
	if err != nil {
		log.Error("fire failed", "error", err)
		contract.WriteError(w, err) // not a *contract.Error: 500 without details; NAS retries
		return OutcomeError
	}
	return answerFire(w, log.With("status", string(res.Status), "run_id", res.RunID), req.JobID, res)
}

// readFireRequest reads and checks the body of a fire.
func (s *Server) readFireRequest(w http.ResponseWriter, r *http.Request) ([]byte, contract.FireRequest, *contract.Error) {
	var req contract.FireRequest
	body, e := s.readJSONBody(w, r)
	if e != nil {
		return nil, req, e
	}
	if e := contract.DecodeBytes(body, &req); e != nil {
		return nil, req, e
	}
	switch {
	case req.JobID == "":
		return nil, req, contract.BadRequest(contract.CodeInvalidRequest, "job_id is required")
	case !contract.ValidJobID(req.JobID):
		return nil, req, contract.BadRequest(contract.CodeInvalidJobID, "job_id must match %s", contract.JobIDPattern)
	case req.FireAt.IsZero():
		return nil, req, contract.BadRequest(contract.CodeInvalidFireAt, "fire_at is required")
	}
	return body, req, nil
}

// fireToken is what a fire's token is verified against.
type fireToken struct {
	token string
	body  []byte
	req   contract.FireRequest
}

// verifyFire verifies a fire's token, waiting a little for NAS's key set on
// a fresh start. When the fire may not proceed it answers and returns the
// outcome and false.
func (s *Server) verifyFire(w http.ResponseWriter, r *http.Request, log *slog.Logger, ft fireToken) (string, bool) {
	if rw, ok := s.cfg.Verifier.(tokenReadyWaiter); ok {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyWait)
		_ = rw.WaitReadyFor(ctx, ft.token) // on timeout VerifyFire answers 503 itself
		cancel()
	} else if rw, ok := s.cfg.Verifier.(readyWaiter); ok {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyWait)
		_ = rw.WaitReady(ctx) // on timeout VerifyFire answers 503 itself
		cancel()
	}
	err := s.cfg.Verifier.VerifyFire(r.Context(), ft.token, ft.body, ft.req)
	if err == nil {
		return "", true
	}
	var ce *contract.Error
	if errors.As(err, &ce) && ce.HTTPStatus() == http.StatusServiceUnavailable {
		log.Warn("fire deferred", "reason", ce.Description)
		contract.WriteError(w, ce)
		return OutcomeUnavailable, false
	}
	if ce != nil && ce.HTTPStatus() == http.StatusTooEarly {
		log.Warn("fire refused: too early", "reason", ce.Description, "retry_after", ce.RetryAfter.String())
		ce.RetryAfter = max(ce.RetryAfter, time.Second)
		contract.WriteError(w, ce)
		return OutcomeTooEarly, false
	}
	desc := "fire token rejected"
	if ce != nil && ce.Description != "" {
		desc = ce.Description
	}
	s.rejected.warn(s.cfg.Now(), log, "fire rejected", "status", http.StatusUnauthorized, "error", err)
	w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	contract.WriteError(w, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "%s", desc))
	return OutcomeUnauthorized, false
}

// answerFire writes the answer to a claimed (or refused) fire and returns
// its outcome.
func answerFire(w http.ResponseWriter, log *slog.Logger, jobID string, res agent.FireResult) string {
	switch res.Status {
	case agent.FireAccepted:
		log.Info("fire accepted", "skipped", res.Skipped, "queued", res.Queued, "reason", res.Reason)
		contract.WriteJSON(w, http.StatusAccepted, contract.FireResponse{Status: contract.FireAccepted, JobID: jobID, RunID: res.RunID})
		return OutcomeAccepted
	case agent.FireDuplicate:
		log.Info("fire duplicate", "reason", res.Reason)
		contract.WriteJSON(w, http.StatusOK, contract.FireResponse{Status: contract.FireDuplicate, JobID: jobID})
		return OutcomeDuplicate
	case agent.FireGone:
		log.Info("fire for an unknown job")
		contract.WriteJSON(w, http.StatusOK, contract.FireResponse{Status: contract.FireGone, JobID: jobID})
		return OutcomeGone
	case agent.FireTooEarly:
		log.Warn("fire refused: too early", "reason", res.Reason, "retry_after", res.RetryAfter.String())
		e := contract.Errorf(http.StatusTooEarly, contract.CodeTooEarly, "%s", res.Reason)
		e.RetryAfter = max(res.RetryAfter, time.Second)
		contract.WriteError(w, e)
		return OutcomeTooEarly
	case agent.FireRefreshed:
		log.Info("refresh fire: arming again nearer to the slot", "reason", res.Reason)
		contract.WriteJSON(w, http.StatusOK, contract.FireResponse{Status: contract.FireRefreshed, JobID: jobID})
		return OutcomeRefreshed
	case agent.FireBusy:
		retry := res.RetryAfter
		if retry <= 0 {
			retry = defaultBusyRetry
		}
		log.Warn("fire deferred", "reason", res.Reason, "retry_after", retry.String())
		contract.WriteError(w, unavailable(retry, "cannot claim the slot now: %s", res.Reason))
		return OutcomeUnavailable
	}
	log.Error("fire: unknown claim status")
	contract.WriteError(w, errors.New("unknown claim status"))
	return OutcomeError
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	contract.WriteJSON(w, http.StatusOK, contract.HealthResponse{Status: "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	resp := contract.HealthResponse{Status: "ok", Checks: map[string]string{}}
	fail := func(name, why string) { resp.Status, resp.Checks[name] = "unavailable", why }
	if s.draining.Load() {
		fail("draining", "shutting down")
	}
	for name, check := range s.cfg.Checks {
		if err := check(r.Context()); err != nil {
			fail(name, err.Error())
			continue
		}
		resp.Checks[name] = "ok"
	}
	if s.cfg.Store != nil {
		if err := s.storeWritable(r.Context()); err != nil {
			fail("store", publicProbeError(err))
		} else {
			resp.Checks["store"] = "ok"
		}
	}
	if s.cfg.Jobs != nil {
		if err := s.cfg.Jobs.JobsReadable(r.Context()); err != nil {
			fail("jobs", err.Error())
		} else {
			resp.Checks["jobs"] = "ok"
		}
	}
	if s.cfg.Sync != nil {
		if err := s.syncCheck(); err != nil {
			fail("sync", err.Error())
		} else {
			resp.Checks["sync"] = "ok"
		}
	}
	status := http.StatusOK
	if resp.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	contract.WriteJSON(w, status, resp)
}

// syncCheck fails once the agent has been out of sync with NAS for longer
// than the resync interval.
func (s *Server) syncCheck() error {
	in, since := s.syncState()
	if in {
		return nil
	}
	if d := s.cfg.Now().Sub(since); d > s.cfg.ResyncInterval {
		return fmt.Errorf("out of sync with NAS for %s, longer than the resync interval of %s", d.Round(time.Second), s.cfg.ResyncInterval)
	}
	return nil
}

// NewHTTPServer returns an http.Server for h with timeouts on every phase,
// so slow clients cannot hold connections.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// readJSONBody reads a request's JSON body within MaxBodyBytes (also when
// it is chunked): a wrong media type is 415, a body over the limit 413.
func (s *Server) readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, *contract.Error) {
	if e := contract.CheckJSONContentType(r.Header.Get(contract.HeaderContentType)); e != nil {
		return nil, e
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return nil, contract.Errorf(http.StatusRequestEntityTooLarge, contract.CodeBodyTooLarge, "body is %d bytes; the limit is %d", r.ContentLength, s.cfg.MaxBodyBytes)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, contract.Errorf(http.StatusRequestEntityTooLarge, contract.CodeBodyTooLarge, "body exceeds %d bytes", s.cfg.MaxBodyBytes)
		}
		return nil, contract.BadRequest(contract.CodeInvalidRequest, "reading body: %v", err)
	}
	return body, nil
}
