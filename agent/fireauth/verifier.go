package fireauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// Health describes the key set as the verifier last saw it.
type Health struct {
	// Loaded is true once a key set with at least one usable key was fetched.
	Loaded bool `json:"loaded"`
	// LoadedAt is when the key set was first loaded.
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// FetchedAt is when the key set in use was fetched (the last successful
	// fetch).
	FetchedAt time.Time `json:"fetched_at,omitzero"`
	// Keys is how many usable keys are cached now.
	Keys int `json:"keys"`
	// LastError is the most recent fetch failure, if any.
	LastError string `json:"last_error,omitempty"`
	// LastErrorAt is when it happened.
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Failures counts failed fetches since start.
	Failures int `json:"failures"`
	// Fetches counts the fetches since start by what started them: "load"
	// (until the first success), "periodic" (every RefreshInterval) and
	// "unknown_kid" (a token named a kid the set lacked).
	Fetches map[string]FetchCount `json:"fetches,omitempty"`
}

// FetchCount counts fetches of the key set by result.
type FetchCount struct {
	OK     int `json:"ok"`
	Failed int `json:"failed"`
}

// Fetch triggers: what started a fetch of the key set.
const (
	TriggerLoad       = "load"
	TriggerPeriodic   = "periodic"
	TriggerUnknownKID = "unknown_kid"
)

// JWTVerifier is the default fire-token verifier. It is safe for concurrent
// use; its methods may be called before the key set is loaded (they refuse a
// token that fails a check needing no key with 401, and answer 503 for the
// others until then).
type JWTVerifier struct {
	cfg       Config
	parser    *jwt.Parser
	validator *jwt.Validator
	// static verifiers never fetch: an unknown kid is refused.
	static bool
	// headers caches the decoded headers of tokens that verified.
	headers headerCache

	set    atomic.Pointer[keySet]
	ready  chan struct{}
	ctx    context.Context // ends at Close; fetches run on it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	inflight *fetchCall
	// lastUnknownKID is when the latest fetch for an unknown kid started
	// (by Now); an unknown kid starts none before it + UnknownKIDInterval.
	lastUnknownKID time.Time
	health         Health
}

// New returns a verifier that loads cfg.JWKSURL in the background, retrying
// with backoff until it succeeds or ctx ends, and then fetches it again every
// RefreshInterval. It returns at once; Ready and WaitReady tell when the keys
// are there. Close stops the background work.
func New(ctx context.Context, cfg Config) (*JWTVerifier, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validateURL(); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	v := newVerifier(cfg)
	v.ctx, v.cancel = context.WithCancel(ctx)
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		v.run(v.ctx)
	}()
	return v, nil
}

// NewStatic returns a verifier over a fixed key set (a JWKS document), ready
// at once. cfg.JWKSURL and the fetch settings are ignored; a token whose kid
// the set lacks is refused (401), since the set never changes.
func NewStatic(jwks []byte, cfg Config) (*JWTVerifier, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	set, err := parseKeySet(context.Background(), jwks, cfg.Now(), cfg.Logger)
	if err != nil {
		return nil, err
	}
	v := newVerifier(cfg)
	v.static = true
	v.ctx, v.cancel = context.WithCancel(context.Background())
	v.installed(set)
	return v, nil
}

// claimChecks are the checks of a token's registered claims every verifier
// makes, by parser or validator alike: exp required, iat, the leeway,
// issuer and audience, on cfg's clock.
func claimChecks(cfg Config) []jwt.ParserOption {
	return []jwt.ParserOption{
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithTimeFunc(cfg.Now),
	}
}

func newVerifier(cfg Config) *JWTVerifier {
	return &JWTVerifier{
		cfg:       cfg,
		ready:     make(chan struct{}),
		parser:    jwt.NewParser(append(claimChecks(cfg), jwt.WithValidMethods(cfg.Methods))...),
		validator: jwt.NewValidator(claimChecks(cfg)...),
		health:    Health{Fetches: map[string]FetchCount{}},
	}
}

// Close stops the key set loader, the refresher and any fetch in progress,
// and waits for them.
func (v *JWTVerifier) Close() {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.cancel()
	v.wg.Wait()
}

// Ready reports whether the key set is loaded.
func (v *JWTVerifier) Ready() bool {
	select {
	case <-v.ready:
		return true
	default:
		return false
	}
}

// WaitReady blocks until the key set is loaded or ctx ends.
func (v *JWTVerifier) WaitReady(ctx context.Context) error {
	select {
	case <-v.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fireauth: waiting for the key set: %w", ctx.Err())
	}
}

// Health returns the key set's state.
func (v *JWTVerifier) Health(context.Context) Health {
	v.mu.Lock()
	h := v.health
	h.Fetches = make(map[string]FetchCount, len(v.health.Fetches))
	for k, c := range v.health.Fetches {
		h.Fetches[k] = c
	}
	v.mu.Unlock()
	if set := v.set.Load(); set != nil {
		h.Keys = set.keys
	}
	return h
}

// reject is a 401 invalid_token whose description is safe to send.
func reject(reason string) *contract.Error {
	return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "fire token rejected: %s", reason)
}

// unavailable is a 503 temporarily_unavailable asking for a retry after d
// (at least a second).
func unavailable(d time.Duration, format string, args ...any) *contract.Error {
	e := contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, format, args...)
	e.RetryAfter = max(d, time.Second)
	return e
}

var (
	errNoKID      = errors.New("kid header is missing")
	errBadTyp     = errors.New("typ header is not " + contract.TokenTypeCronFire)
	errUnknownKID = errors.New("kid is not in the key set")
)

// VerifyFire checks token for the fire request req whose exact body bytes are
// body. It returns nil when the fire may proceed, a 401 invalid_token
// *contract.Error when the token is refused, a 425 too_early
// *contract.Error with a retry delay when the token's only fault is that it
// is not valid yet (its nbf or iat is further ahead of the clock than the
// leeway; see tooEarly), and a 503 *contract.Error with
// a retry delay when only the key set can decide and it cannot now: while
// it is not loaded yet, and when the token names a kid the set lacks (see
// Config.UnknownKIDInterval). A token that fails any check needing no key
// is refused at once in every case.
func (v *JWTVerifier) VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error {
	if token == "" {
		return reject("no token")
	}
	set := v.set.Load()
	if set == nil {
		// Without the keys only the signature is in doubt: a token that
		// fails any other check is refused now, not retried.
		if reason := v.refuseUnsigned(token, body, req); reason != "" {
			v.cfg.Logger.Warn("fireauth: fire token rejected", "job_id", req.JobID, "reason", reason)
			return reject(reason)
		}
		return unavailable(notReadyRetryAfter, "the agent has not loaded NAS's signing keys yet")
	}
	claims, err := v.parse(ctx, set, token)
	if errors.Is(err, errUnknownKID) && !v.static {
		if reason := v.refuseUnsigned(token, body, req); reason != "" {
			v.cfg.Logger.Warn("fireauth: fire token rejected", "job_id", req.JobID, "reason", reason)
			return reject(reason)
		}
		var e *contract.Error
		if claims, e = v.verifyUnknownKID(ctx, set, token, body, req); e != nil {
			return e
		}
		err = nil
	}
	if err != nil {
		if e := v.tooEarly(claims, err, body, req); e != nil {
			return e
		}
		reason := parseReason(err)
		v.cfg.Logger.Warn("fireauth: fire token rejected", "job_id", req.JobID, "reason", reason, "error", err)
		return reject(reason)
	}
	if reason := v.checkClaims(claims, body, req); reason != "" {
		v.cfg.Logger.Warn("fireauth: fire token rejected", "job_id", req.JobID, "reason", reason)
		return reject(reason)
	}
	v.observeIssued(claims)
	return nil
}

// observeIssued hands a verified token's iat to Config.Issued.
func (v *JWTVerifier) observeIssued(c *contract.FireClaims) {
	if v.cfg.Issued != nil && c.IssuedAt != nil {
		v.cfg.Issued.ObserveIssued(c.IssuedAt.Time)
	}
}

// verifyUnknownKID handles a token that passes every check needing no key
// but names a kid the key set used lacks: it waits for a shared fetch of the
// key set when one is running or may start, and verifies the token against
// the newest set. It answers 503 with the time until the next fetch may
// start when none may start now and the newest set lacks the kid too, or
// the fetched set still lacks it; a 401 when the kid is found and the token
// fails against its key.
func (v *JWTVerifier) verifyUnknownKID(ctx context.Context, used *keySet, token string, body []byte, req contract.FireRequest) (*contract.FireClaims, *contract.Error) {
	call, wait := v.fetchForUnknownKID()
	if call == nil {
		// A fetch may have finished since used was read.
		if cur := v.set.Load(); cur != used {
			if claims, err := v.parse(ctx, cur, token); !errors.Is(err, errUnknownKID) {
				return v.verified(claims, err, body, req)
			}
		}
		// Debug only: this is what a flood of made-up kids produces, and
		// the fire route logs and counts every deferred fire anyway.
		v.cfg.Logger.Debug("fireauth: unknown kid; the key set was fetched for an unknown kid moments ago", "job_id", req.JobID, "retry_after", wait.String())
		return nil, unavailable(wait, "the token's kid is not in NAS's key set as fetched moments ago; retry once it may be fetched again")
	}
	select {
	case <-call.done:
	case <-ctx.Done():
		return nil, unavailable(time.Second, "gave up waiting for NAS's key set")
	}
	claims, err := v.parse(ctx, v.set.Load(), token)
	if errors.Is(err, errUnknownKID) {
		wait := v.untilUnknownKIDFetch()
		if call.err != nil {
			v.cfg.Logger.Warn("fireauth: unknown kid while the key set is unreachable", "job_id", req.JobID, "error", call.err, "retry_after", wait.String())
			return nil, unavailable(wait, "cannot fetch NAS's signing keys to find the token's kid")
		}
		v.cfg.Logger.Warn("fireauth: unknown kid; not in the key set just fetched", "job_id", req.JobID, "retry_after", wait.String())
		return nil, unavailable(wait, "the token's kid is not in NAS's key set; retry once it may be fetched again")
	}
	return v.verified(claims, err, body, req)
}
