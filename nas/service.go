package nas

// What the Service is built from and how its parts are wired: construction,
// readiness and the accessors of the parts. The parts are in agentapi.go
// (AgentAPI), relayroute.go and localdelivery.go (Fires), operator.go
// (Operator), opsession.go (OperatorAuth), overview.go and explorer.go
// (Explorer), flow.go (Flow), selfheal.go (SelfHeal) and direct.go; what
// they share is in core.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// FireCaller POSTs one fire to an agent and says what its answer means.
type FireCaller interface {
	Fire(ctx context.Context, fireURL, token string, body []byte) agentcall.FireResult
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

// Service is NAS's domain. It is a façade that builds and wires its parts,
// each of which does one thing:
//
//   - AgentAPI: the agent API (provision, cancel, list, the bulk armed set,
//     the acknowledgement of failed fires) and the agents' authorization;
//   - Fires: the fire path, from a relay call or a leased fire to the
//     agent's answer (mint the fire token, call the agent, say what the
//     answer means as a Verdict);
//   - Operator: the operator's actions (stop and start instances, disable,
//     enable, re-key and cancel agents, the dead letter);
//   - OperatorAuth: the operator token and the dashboard's sessions;
//   - Explorer: the overview, history and agent views the dashboard reads;
//   - Flow: the agents file's flow control and the disabled agents;
//   - SelfHeal: last fires, unarmed jobs and reconcile requests.
//
// It is safe for concurrent use.
type Service struct {
	core     *core
	agents   *AgentAPI
	fires    *Fires
	operator *Operator
	auth     *OperatorAuth
	explorer *Explorer
	flow     *Flow
	heal     *SelfHeal
	direct   *directKeys
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
	c := &core{
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
		source:   policySource(opts.Verifier),
		summary:  &fireSummary{},
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.caller == nil {
		c.caller = NewAgentCaller(c.policy, cfg.DeliveryTimeout)
	}
	if cfg.OperatorToken != "" {
		c.operatorToken = []byte(cfg.OperatorToken)
	}
	// iss is public_url exactly as configured: the agents compare it with
	// their portal_url, which operators copy from the same place.
	c.minter = &Minter{Keys: opts.Keys, Issuer: cfg.PublicURL, TTL: cfg.FireTokenTTL}
	c.metrics = newMetrics(opts.Engine)
	s := &Service{core: c}
	if s.direct, err = newDirectKeys(c); err != nil {
		return nil, fmt.Errorf("nas: %w", err)
	}
	s.heal = newSelfHeal(c)
	s.flow = newFlow(c)
	census := &censusCache{core: c}
	s.explorer = &Explorer{core: c, census: census}
	s.agents = &AgentAPI{core: c, flow: s.flow, heal: s.heal, direct: s.direct}
	s.fires = &Fires{core: c, heal: s.heal, direct: s.direct}
	s.operator = &Operator{core: c, flow: s.flow, heal: s.heal, census: census}
	s.auth = &OperatorAuth{core: c, revoked: newSessionRevocations(opts.Engine, cfg.Store, c.log, c.now), logins: newLoginThrottle(c.log, c.now)}
	return s, nil
}

// AgentAPI returns the agent API.
func (s *Service) AgentAPI() *AgentAPI { return s.agents }

// Fires returns the fire path: the relay route's delivery of a fire.
func (s *Service) Fires() *Fires { return s.fires }

// Operator returns the operator's actions.
func (s *Service) Operator() *Operator { return s.operator }

// OperatorAuth returns the operator's authorization: token and sessions.
func (s *Service) OperatorAuth() *OperatorAuth { return s.auth }

// Explorer returns the dashboard's views: overview, history, agents.
func (s *Service) Explorer() *Explorer { return s.explorer }

// Flow returns the agents' flow control and kill switch state.
func (s *Service) Flow() *Flow { return s.flow }

// SelfHeal returns the self-healing part: unarmed jobs and reconcile
// requests.
func (s *Service) SelfHeal() *SelfHeal { return s.heal }

// Close stops the background work of the Service (reconcile requests in
// flight) and waits for it.
func (s *Service) Close() { s.heal.close() }

// Config returns the effective configuration.
func (s *Service) Config() Config { return s.core.cfg }

// Metrics returns the service's metrics.
func (s *Service) Metrics() *Metrics { return s.core.metrics }

// JWKS returns the published keys as JSON.
func (s *Service) JWKS() []byte { return s.core.keys.Current().JWKS() }

// HasOperator reports whether the operator routes are enabled.
func (s *Service) HasOperator() bool { return s.core.hasOperator() }

// Ready reports whether NAS can serve: keys are loaded, the engine answers
// and (on an engine that can lose its data under NAS, relay.StoreEpoch) no
// loss of the store's data is being reported: check "store_epoch".
func (s *Service) Ready(ctx context.Context) map[string]error {
	checks := map[string]error{"keys": nil, "store": nil}
	if set := s.core.keys.Current(); set == nil || set.Active == nil {
		checks["keys"] = errors.New("no signing key")
	}
	// Bounded by relay.ReadyWithin: a store node that is down fails
	// "store" (naming its shards) rather than holding the answer.
	for name, err := range relay.CheckStore(ctx, s.core.engine) {
		checks[name] = err
	}
	if r, ok := s.core.verifier.(readier); ok {
		checks["agent_keys"] = r.Ready(ctx)
	}
	return checks
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
