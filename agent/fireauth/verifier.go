package fireauth

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/chronoscron/chronos/contract"
)

// Defaults of Config.
const (
	DefaultLeeway          = 30 * time.Second
	DefaultMaxLifetime     = contract.MaxFireTokenLifetimeSeconds * time.Second
	DefaultHTTPTimeout     = 5 * time.Second
	DefaultMaxJWKSBytes    = 256 << 10
	DefaultRefreshInterval = 5 * time.Minute
	DefaultUnknownKIDEvery = 30 * time.Second
	DefaultUnknownKIDBurst = 2
	DefaultUnknownKIDWait  = 2 * time.Second
	DefaultLoadBackoff     = 250 * time.Millisecond
	DefaultLoadBackoffMax  = 30 * time.Second
	// notReadyRetryAfter is the Retry-After sent while the keys are loading.
	notReadyRetryAfter = 5 * time.Second
	// keysDownRetryAfter is the Retry-After sent for an unknown kid while
	// the key set cannot be fetched.
	keysDownRetryAfter = 30 * time.Second
)

// DefaultMethods are the signing algorithms accepted unless Config.Methods
// says otherwise: NAS signs with ES256 by default, EdDSA or RS256 by setting.
// HMAC and none are never accepted, whatever the configuration says.
var DefaultMethods = []string{"EdDSA", "ES256", "ES384", "RS256", "RS384", "RS512"}

// Config configures a JWTVerifier. Zero fields take the defaults named in
// their comments.
type Config struct {
	// JWKSURL is NAS's key set (cron.chronos.nas_jwks_url). Required by New.
	JWKSURL string
	// Issuer is the required iss claim (cron.chronos.portal_url). Required.
	Issuer string
	// Audience is the one required aud value (cron.chronos.expected_audience,
	// agent:{instance_id}). Required.
	Audience string
	// Methods is the algorithm allow-list; default DefaultMethods. HMAC
	// algorithms and none are refused by New.
	Methods []string
	// Leeway is the clock skew allowed on exp, nbf and iat; default 30 s.
	Leeway time.Duration
	// MaxLifetime bounds exp - iat; default 120 s.
	MaxLifetime time.Duration

	// HTTPClient fetches the key set; default NewJWKSClient(HTTPTimeout, MaxJWKSBytes).
	HTTPClient *http.Client
	// HTTPTimeout bounds one fetch of the key set; default 5 s.
	HTTPTimeout time.Duration
	// MaxJWKSBytes caps the key set response; default 256 KiB.
	MaxJWKSBytes int64
	// RefreshInterval is how often the loaded key set is fetched again, so a
	// key NAS publishes ahead of a rotation is known before it signs; default 5 min.
	RefreshInterval time.Duration
	// UnknownKIDLimiter limits the refreshes a token with an unknown kid may
	// trigger. The default allows a burst of 2 and then one every 30 s: NAS
	// publishes its next key before signing with it, so a legitimate unknown
	// kid is rare and one refresh finds it, while a flood of made-up kids
	// costs NAS at most two fetches a minute. The initial load never spends
	// this allowance.
	UnknownKIDLimiter *rate.Limiter
	// UnknownKIDWait is the longest a request waits for that limiter before
	// it is rejected; default 2 s.
	UnknownKIDWait time.Duration
	// LoadBackoff and LoadBackoffMax bound the retry delay of the initial
	// load (exponential with jitter); defaults 250 ms and 30 s.
	LoadBackoff, LoadBackoffMax time.Duration

	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives rejections and key set errors; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if len(c.Methods) == 0 {
		c.Methods = DefaultMethods
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = DefaultMaxLifetime
	}
	if c.HTTPTimeout == 0 {
		c.HTTPTimeout = DefaultHTTPTimeout
	}
	if c.MaxJWKSBytes == 0 {
		c.MaxJWKSBytes = DefaultMaxJWKSBytes
	}
	if c.HTTPClient == nil {
		c.HTTPClient = NewJWKSClient(c.HTTPTimeout, c.MaxJWKSBytes)
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.UnknownKIDLimiter == nil {
		c.UnknownKIDLimiter = rate.NewLimiter(rate.Every(DefaultUnknownKIDEvery), DefaultUnknownKIDBurst)
	}
	if c.UnknownKIDWait == 0 {
		c.UnknownKIDWait = DefaultUnknownKIDWait
	}
	if c.LoadBackoff == 0 {
		c.LoadBackoff = DefaultLoadBackoff
	}
	if c.LoadBackoffMax == 0 {
		c.LoadBackoffMax = DefaultLoadBackoffMax
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate(needURL bool) error {
	if needURL {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("fireauth: JWKSURL %q must be an absolute http(s) URL", c.JWKSURL)
		}
	}
	if c.Issuer == "" {
		return errors.New("fireauth: Issuer is required")
	}
	if c.Audience == "" {
		return errors.New("fireauth: Audience is required")
	}
	for _, m := range c.Methods {
		switch m {
		case "EdDSA", "ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		default:
			return fmt.Errorf("fireauth: method %q is not an allowed asymmetric signing algorithm", m)
		}
	}
	if c.MaxLifetime < 0 || c.Leeway < 0 {
		return errors.New("fireauth: Leeway and MaxLifetime must not be negative")
	}
	return nil
}

// Health describes the key set as the verifier last saw it.
type Health struct {
	// Loaded is true once a key set with at least one usable key was fetched.
	Loaded bool `json:"loaded"`
	// LoadedAt is when the key set was first loaded.
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// Keys is how many usable keys are cached now.
	Keys int `json:"keys"`
	// LastError is the most recent fetch failure, if any.
	LastError string `json:"last_error,omitempty"`
	// LastErrorAt is when it happened.
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Failures counts failed fetches since start.
	Failures int `json:"failures"`
}

// JWTVerifier is the default fire-token verifier. It is safe for concurrent
// use; its methods may be called before the key set is loaded (they refuse a
// token that fails a check needing no key with 401, and answer 503 for the
// others until then).
type JWTVerifier struct {
	cfg       Config
	parser    *jwt.Parser
	validator *jwt.Validator

	kf     atomic.Pointer[keyfunc.Keyfunc]
	ready  chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	health      Health
	stopRefresh context.CancelFunc
}

// New returns a verifier that loads cfg.JWKSURL in the background, retrying
// with backoff until it succeeds or ctx ends. It returns at once; Ready and
// WaitReady tell when the keys are there. Close stops the background work.
func New(ctx context.Context, cfg Config) (*JWTVerifier, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	v := newVerifier(cfg)
	ctx, v.cancel = context.WithCancel(ctx)
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		v.load(ctx)
	}()
	return v, nil
}

// NewStatic returns a verifier over a fixed key set (a JWKS document), ready
// at once. cfg.JWKSURL and the fetch settings are ignored.
func NewStatic(jwks []byte, cfg Config) (*JWTVerifier, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	kf, err := keyfunc.NewJWKSetJSON(json.RawMessage(jwks))
	if err != nil {
		return nil, fmt.Errorf("fireauth: key set: %w", err)
	}
	v := newVerifier(cfg)
	v.cancel = func() {}
	if n := countKeys(context.Background(), kf); n == 0 {
		return nil, errors.New("fireauth: key set has no usable key")
	}
	v.setLoaded(kf)
	return v, nil
}

func newVerifier(cfg Config) *JWTVerifier {
	return &JWTVerifier{
		cfg:   cfg,
		ready: make(chan struct{}),
		parser: jwt.NewParser(
			jwt.WithValidMethods(cfg.Methods),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(cfg.Leeway),
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithTimeFunc(cfg.Now),
		),
		validator: jwt.NewValidator(
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(cfg.Leeway),
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithTimeFunc(cfg.Now),
		),
	}
}

// Close stops the key set loader and refresher and waits for the loader.
func (v *JWTVerifier) Close() {
	v.cancel()
	v.wg.Wait()
	v.mu.Lock()
	if v.stopRefresh != nil {
		v.stopRefresh()
	}
	v.mu.Unlock()
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
func (v *JWTVerifier) Health(ctx context.Context) Health {
	v.mu.Lock()
	h := v.health
	v.mu.Unlock()
	if kf := v.kf.Load(); kf != nil {
		h.Keys = countKeys(ctx, *kf)
	}
	return h
}

func countKeys(ctx context.Context, kf keyfunc.Keyfunc) int {
	keys, err := kf.Storage().KeyReadAll(ctx)
	if err != nil {
		return 0
	}
	return len(keys)
}

func (v *JWTVerifier) fetchFailures() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.health.Failures
}

func (v *JWTVerifier) setLoaded(kf keyfunc.Keyfunc) {
	v.kf.Store(&kf)
	v.mu.Lock()
	v.health.Loaded = true
	v.health.LoadedAt = v.cfg.Now()
	v.mu.Unlock()
	close(v.ready)
}

func (v *JWTVerifier) recordFetchError(err error) {
	if errors.Is(err, context.Canceled) {
		return // shutting down, not a key set failure
	}
	v.mu.Lock()
	v.health.LastError = err.Error()
	v.health.LastErrorAt = v.cfg.Now()
	v.health.Failures++
	v.mu.Unlock()
	v.cfg.Logger.Warn("fireauth: fetching the key set failed", "url", v.cfg.JWKSURL, "error", err)
}

// load fetches the key set until one load succeeds. Each attempt builds a
// fresh keyfunc whose refresh goroutine lives on its own context, cancelled
// when the attempt fails, so failed attempts leave nothing running and never
// touch the unknown-kid limiter.
func (v *JWTVerifier) load(ctx context.Context) {
	delay := v.cfg.LoadBackoff
	for {
		attemptCtx, cancelAttempt := context.WithCancel(ctx)
		var reported atomic.Bool
		kf, err := keyfunc.NewDefaultOverrideCtx(attemptCtx, []string{v.cfg.JWKSURL}, keyfunc.Override{
			Client:           v.cfg.HTTPClient,
			HTTPTimeout:      v.cfg.HTTPTimeout,
			RateLimitWaitMax: v.cfg.UnknownKIDWait,
			RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
				return func(_ context.Context, err error) {
					reported.Store(true)
					v.recordFetchError(err)
				}
			},
			RefreshInterval:   v.cfg.RefreshInterval,
			RefreshUnknownKID: v.cfg.UnknownKIDLimiter,
		})
		if err == nil && countKeys(ctx, kf) > 0 {
			// The refresh goroutine of kf runs until Close.
			v.mu.Lock()
			v.stopRefresh = cancelAttempt
			v.mu.Unlock()
			v.setLoaded(kf)
			return
		}
		cancelAttempt()
		switch {
		case err != nil:
			v.recordFetchError(err)
		case !reported.Load():
			v.recordFetchError(errors.New("key set has no usable key"))
		}
		wait := delay/2 + rand.N(delay/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, v.cfg.LoadBackoffMax)
	}
}

// reject is a 401 invalid_token whose description is safe to send.
func reject(reason string) *contract.Error {
	return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "fire token rejected: %s", reason)
}

var (
	errNoKID  = errors.New("kid header is missing")
	errBadTyp = errors.New("typ header is not " + contract.TokenTypeCronFire)
)

// VerifyFire checks token for the fire request req whose exact body bytes are
// body. It returns nil when the fire may proceed, a 401 invalid_token
// *contract.Error when the token is refused, and a 503 *contract.Error while
// the key set is not loaded yet.
func (v *JWTVerifier) VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error {
	if token == "" {
		return reject("no token")
	}
	kfp := v.kf.Load()
	if kfp == nil {
		// Without the keys only the signature is in doubt: a token that
		// fails any other check is refused now, not retried.
		if reason := v.refuseUnsigned(token, body, req); reason != "" {
			v.cfg.Logger.Warn("fireauth: fire token rejected", "job_id", req.JobID, "reason", reason)
			return reject(reason)
		}
		e := contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "the agent has not loaded NAS's signing keys yet")
		e.RetryAfter = notReadyRetryAfter
		return e
	}
	keys := (*kfp).KeyfuncCtx(ctx)
	failuresBefore := v.fetchFailures()
	claims := &contract.FireClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if kid, ok := t.Header["kid"].(string); !ok || kid == "" {
			return nil, errNoKID
		}
		if typ, _ := t.Header["typ"].(string); typ != contract.TokenTypeCronFire {
			return nil, errBadTyp
		}
		return keys(t)
	})
	if err != nil {
		if errors.Is(err, jwkset.ErrKeyNotFound) && v.fetchFailures() > failuresBefore {
			// The kid is unknown and fetching the key set to look for it
			// failed: NAS may have rotated while its key set is unreachable.
			// Ask for a retry rather than refusing a fire that may be good.
			v.cfg.Logger.Warn("fireauth: unknown kid while the key set is unreachable", "job_id", req.JobID, "error", err)
			e := contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "cannot fetch NAS's signing keys to find the token's kid")
			e.RetryAfter = keysDownRetryAfter
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
	return nil
}

// refuseUnsigned applies every check that needs no key to token, unverified:
// its form, algorithm, kid and typ headers, time and issuer claims, and the
// checks of checkClaims. It returns the reason of the first failure, or ""
// when only the signature is left to check.
func (v *JWTVerifier) refuseUnsigned(token string, body []byte, req contract.FireRequest) string {
	claims := &contract.FireClaims{}
	t, _, err := jwt.NewParser().ParseUnverified(token, claims)
	switch {
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "signature or algorithm not accepted" // an algorithm golang-jwt does not know
	case err != nil:
		return parseReason(err)
	case !slices.Contains(v.cfg.Methods, t.Method.Alg()):
		return "signature or algorithm not accepted"
	}
	if kid, ok := t.Header["kid"].(string); !ok || kid == "" {
		return parseReason(errNoKID)
	}
	if typ, _ := t.Header["typ"].(string); typ != contract.TokenTypeCronFire {
		return parseReason(errBadTyp)
	}
	if err := v.validator.Validate(claims); err != nil {
		return parseReason(err)
	}
	return v.checkClaims(claims, body, req)
}

// checkClaims applies the checks golang-jwt does not: returns "" when the
// claims are acceptable, else the reason.
func (v *JWTVerifier) checkClaims(c *contract.FireClaims, body []byte, req contract.FireRequest) string {
	switch {
	case c.Audience != v.cfg.Audience:
		return "aud does not name this agent"
	case c.IssuedAt == nil:
		return "iat is missing"
	case c.ExpiresAt == nil:
		return "exp is missing"
	}
	life := c.ExpiresAt.Sub(c.IssuedAt.Time)
	switch {
	case life <= 0:
		return "exp is not after iat"
	case life > v.cfg.MaxLifetime:
		return fmt.Sprintf("lifetime exp - iat is %s, more than %s", life, v.cfg.MaxLifetime)
	case c.Purpose != contract.PurposeCronFire:
		return "purpose is not " + contract.PurposeCronFire
	case c.JobID == "" || c.JobID != req.JobID:
		return "job_id does not match the body"
	case c.ScheduleID != req.ScheduleID:
		return "schedule_id does not match the body"
	case c.Attempt != req.Attempt:
		return "attempt does not match the body"
	}
	at, err := contract.ParseTime(c.FireAt)
	if err != nil || !at.Equal(req.FireAt.Time) {
		return "fire_at does not match the body"
	}
	if subtle.ConstantTimeCompare([]byte(c.BodyHash), []byte(contract.BodyHash(body))) != 1 {
		return "bh does not match the body"
	}
	return ""
}

// parseReason names what golang-jwt refused, without echoing token contents.
func parseReason(err error) string {
	switch {
	case errors.Is(err, errNoKID):
		return "kid header is missing"
	case errors.Is(err, errBadTyp):
		return "typ header is not " + contract.TokenTypeCronFire
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "signature or algorithm not accepted"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "no key verifies this token"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "a required claim is missing"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token is expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token is not valid yet"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token is issued in the future"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "aud does not name this agent"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "iss is not NAS"
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return "invalid claims"
	default:
		return "token could not be verified"
	}
}
