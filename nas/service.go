package nas

// What the Service is built from and what every route shares: construction,
// readiness, the mapping of engine errors. The routes themselves are in
// agentapi.go (agent API), relayroute.go (the signed relay route) and
// operator.go (operator routes), their callers checked in auth.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// FireCaller POSTs one fire to an agent and says what its answer means.
type FireCaller interface {
	Fire(ctx context.Context, fireURL, token string, body []byte) FireResult
}

var _ FireCaller = (*AgentCaller)(nil)

// Options are the parts a Service is built from.
type Options struct {
	// Config is the NAS configuration; New applies WithDefaults.
	Config Config
	// Engine is the relay store.
	Engine relay.Engine
	// Verifier identifies agents from their tokens.
	Verifier AgentVerifier
	// Keys are the fire-token signing keys.
	Keys *KeyRing
	// Logger receives JSON logs; default slog.Default().
	Logger *slog.Logger
	// Now is the service clock; default time.Now.
	Now func() time.Time
	// Caller calls agents; default NewAgentCaller with the config's SSRF
	// policy and delivery_timeout.
	Caller FireCaller
}

// Service is NAS's domain: agent API, relay route, operator actions. It is
// safe for concurrent use.
type Service struct {
	cfg      Config
	engine   relay.Engine
	verifier AgentVerifier
	keys     *KeyRing
	log      *slog.Logger
	now      func() time.Time
	caller   FireCaller
	policy   CallbackPolicy
	minter   *Minter
	secrets  [][]byte
	cursors  cursorSigner
	limiter  *agentLimiter
	metrics  *Metrics
	operator []byte
	heal     selfHeal
	census   censusCache        // the overview's agents and stopped instances
	flow     flowState          // the agents' flow control and kill switch
	summary  fireSummary        // the relay route's fires since its last INFO summary
	sessions sessionRevocations // operator sessions ended by a logout
	logins   *loginThrottle     // the dashboard login's failures per address
	direct   directState        // direct delivery's cron keys
}

// New builds a Service. Config must validate after WithDefaults, except that
// no agent credential source is needed when Verifier is given. An unset
// signing_alg is the algorithm of Keys' signing key.
func New(opts Options) (*Service, error) {
	if opts.Engine == nil || opts.Verifier == nil || opts.Keys == nil || opts.Keys.Current() == nil {
		return nil, errors.New("nas: engine, verifier and keys are required")
	}
	if opts.Keys.Current().Active == nil {
		return nil, errors.New("nas: keys: the key set has no active signing key")
	}
	cfg := opts.Config
	if cfg.SigningAlg == "" {
		cfg.SigningAlg = opts.Keys.Alg()
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("nas: %w", err)
	}
	if alg := opts.Keys.Current().Active.Alg; alg != cfg.SigningAlg {
		return nil, fmt.Errorf("nas: the signing key is %s but signing_alg is %s", alg, cfg.SigningAlg)
	}
	secrets := make([][]byte, 0, len(cfg.Relay.Secrets))
	for _, s := range cfg.Relay.Secrets {
		k, err := contract.ParseWebhookSecret(s)
		if err != nil {
			return nil, fmt.Errorf("nas: relay.secrets: %w", err)
		}
		secrets = append(secrets, k)
	}
	allow, err := ParseAllowlist(cfg.CallbackAllowlist)
	if err != nil {
		return nil, fmt.Errorf("nas: callback_allowlist: %w", err)
	}
	s := &Service{
		cfg:      cfg,
		engine:   opts.Engine,
		verifier: opts.Verifier,
		keys:     opts.Keys,
		log:      opts.Logger,
		now:      opts.Now,
		caller:   opts.Caller,
		policy:   CallbackPolicy{AllowPrivate: cfg.AllowPrivateCallbacks, Allow: allow},
		secrets:  secrets,
		cursors:  newCursorSigner(secrets),
		limiter:  newAgentLimiter(cfg.Limits.RatePerSecond, cfg.Limits.Burst),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.caller == nil {
		s.caller = NewAgentCaller(s.policy, cfg.DeliveryTimeout)
	}
	if cfg.OperatorToken != "" {
		s.operator = []byte(cfg.OperatorToken)
	}
	// iss is public_url exactly as configured: the agents compare it with
	// their portal_url, which operators copy from the same place.
	s.minter = &Minter{Keys: opts.Keys, Issuer: cfg.PublicURL, TTL: cfg.FireTokenTTL}
	s.metrics = newMetrics(opts.Engine)
	if err := s.initDirect(policySource(s.verifier)); err != nil {
		return nil, fmt.Errorf("nas: %w", err)
	}
	s.initSelfHeal()
	s.initFlow()
	s.sessions = newSessionRevocations(opts.Engine, cfg.Store, s.log, s.now)
	s.logins = newLoginThrottle(s.log, s.now)
	return s, nil
}

// Config returns the effective configuration.
func (s *Service) Config() Config { return s.cfg }

// Metrics returns the service's metrics.
func (s *Service) Metrics() *Metrics { return s.metrics }

// JWKS returns the published keys as JSON.
func (s *Service) JWKS() []byte { return s.keys.Current().JWKS() }

// HasOperator reports whether the operator routes are enabled.
func (s *Service) HasOperator() bool { return len(s.operator) > 0 }

// Ready reports whether NAS can serve: keys are loaded, the engine answers
// and (on an engine that can lose its data under NAS, relay.StoreEpoch) no
// loss of the store's data is being reported: check "store_epoch".
func (s *Service) Ready(ctx context.Context) map[string]error {
	checks := map[string]error{"keys": nil, "store": nil}
	if set := s.keys.Current(); set == nil || set.Active == nil {
		checks["keys"] = errors.New("no signing key")
	}
	// Bounded by relay.ReadyWithin: a store node that is down fails
	// "store" (naming its shards) rather than holding the answer.
	for name, err := range relay.CheckStore(ctx, s.engine) {
		checks[name] = err
	}
	if r, ok := s.verifier.(readier); ok {
		checks["agent_keys"] = r.Ready(ctx)
	}
	return checks
}

// engineErr maps the engine errors an agent can cause to their answers and
// wraps any other with op.
func (s *Service) engineErr(op string, err error) error {
	switch {
	case errors.Is(err, relay.ErrQuotaExceeded):
		return contract.Errorf(http.StatusUnprocessableEntity, contract.CodeQuotaExceeded,
			"the agent already has %d armed jobs", s.cfg.Limits.MaxArmedPerAgent)
	case errors.Is(err, relay.ErrInvalidCursor):
		return contract.BadRequest(contract.CodeInvalidCursor, "cursor is not one NAS issued to this agent")
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// checkJobID answers 400 invalid_job_id for an id that is not a job id.
func checkJobID(id string) *contract.Error {
	if !contract.ValidJobID(id) {
		return contract.BadRequest(contract.CodeInvalidJobID, "job_id must match %s", contract.JobIDPattern)
	}
	return nil
}

// fireAt is a one-shot's fire_at as NAS reports it to the agent: in the
// spelling the agent provisioned it with, byte for byte.
func fireAt(o relay.OneShot) contract.Time {
	return contract.NewTimeSpelled(o.FireAt, o.FireAtSpelling)
}
