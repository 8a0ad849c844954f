package fireauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// Defaults of Config.
const (
	DefaultLeeway             = 30 * time.Second
	DefaultMaxLifetime        = contract.MaxFireTokenLifetimeSeconds * time.Second
	DefaultHTTPTimeout        = 5 * time.Second
	DefaultMaxJWKSBytes       = 256 << 10
	DefaultRefreshInterval    = 5 * time.Minute
	DefaultUnknownKIDInterval = 10 * time.Second
	DefaultLoadBackoff        = 250 * time.Millisecond
	DefaultLoadBackoffMax     = 30 * time.Second
	// notReadyRetryAfter is the Retry-After sent while the keys are loading.
	notReadyRetryAfter = 5 * time.Second
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
	// UnknownKIDInterval is the least time between the starts of two
	// fetches of the key set made because a token names a kid the set
	// lacks; default 10 s. A fetch in progress (of any kind) is shared:
	// every token waiting for one uses its result, and a token that arrives
	// while no fetch may start is answered 503 with Retry-After until one
	// may. So callers who present no valid signature can cost NAS at most
	// one fetch per interval and never use up the fetch a real fire signed
	// with a new key needs: that fire verifies at once when no such fetch
	// ran within the interval, else on a retry at most one interval later.
	UnknownKIDInterval time.Duration
	// LoadBackoff and LoadBackoffMax bound the retry delay of the initial
	// load (exponential with jitter); defaults 250 ms and 30 s.
	LoadBackoff, LoadBackoffMax time.Duration

	// Now is the clock; default time.Now. The tokens' time claims, the
	// unknown-kid interval and the times in Health are judged by it. An
	// agent passes NAS's clock as it estimates it (clockskew.Estimator.Now),
	// so a host clock that drifted does not refuse NAS's tokens.
	Now func() time.Time
	// Issued, when set, is told the iat of every fire token whose signature
	// and claims verified but for, at most, not being valid yet: evidence
	// of NAS's clock (*clockskew.Estimator).
	Issued IssuedObserver
	// Logger receives rejections and key set errors; default slog.Default().
	Logger *slog.Logger
}

// IssuedObserver takes the iat of a fire token NAS signed.
type IssuedObserver interface {
	ObserveIssued(iat time.Time)
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
	if c.HTTPTimeout <= 0 {
		c.HTTPTimeout = DefaultHTTPTimeout
	}
	if c.MaxJWKSBytes <= 0 {
		c.MaxJWKSBytes = DefaultMaxJWKSBytes
	}
	if c.HTTPClient == nil {
		c.HTTPClient = NewJWKSClient(c.HTTPTimeout, c.MaxJWKSBytes)
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.UnknownKIDInterval <= 0 {
		c.UnknownKIDInterval = DefaultUnknownKIDInterval
	}
	if c.LoadBackoff <= 0 {
		c.LoadBackoff = DefaultLoadBackoff
	}
	if c.LoadBackoffMax <= 0 {
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

// validateURL checks JWKSURL, which only a verifier that fetches its key
// set needs.
func (c Config) validateURL() error {
	u, err := url.Parse(c.JWKSURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("fireauth: JWKSURL %q must be an absolute http(s) URL", c.JWKSURL)
	}
	return nil
}

// validate checks the settings every verifier needs.
func (c Config) validate() error {
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

// tooEarly answers a fire token whose signature verified but whose claims
// failed (err) when its only fault is that it is not valid yet: every other
// check, those of checkClaims included, passes. It hands the token's iat
// to Config.Issued first, so that the answer's Retry-After, the time until
// the token is valid by the clock less the leeway, is computed with what
// the token taught the clock. It returns nil when the token has another
// fault.
func (v *JWTVerifier) tooEarly(claims *contract.FireClaims, err error, body []byte, req contract.FireRequest) *contract.Error {
	from, ok := v.validFrom(claims, err)
	if !ok || v.checkClaims(claims, body, req) != "" {
		return nil
	}
	ahead := from.Sub(v.cfg.Now())
	v.observeIssued(claims)
	wait := from.Sub(v.cfg.Now().Add(v.cfg.Leeway))
	e := contract.Errorf(http.StatusTooEarly, contract.CodeTooEarly,
		"fire token is not valid yet: it is valid from %s ahead of the agent's clock; the allowed skew is %s",
		ahead.Round(time.Second), v.cfg.Leeway)
	e.RetryAfter = max(wait, time.Second)
	v.cfg.Logger.Warn("fireauth: fire token not valid yet", "job_id", req.JobID, "ahead", ahead.Round(time.Millisecond).String(), "retry_after", e.RetryAfter.String())
	return e
}

// validFrom reports whether claims, which failed golang-jwt's checks with
// err, fail only for not being valid yet: nbf or iat later than the clock
// plus the leeway, and every registered check passing at the later of the
// two. It returns that instant.
func (v *JWTVerifier) validFrom(claims jwt.Claims, err error) (time.Time, bool) {
	if claims == nil || (!errors.Is(err, jwt.ErrTokenNotValidYet) && !errors.Is(err, jwt.ErrTokenUsedBeforeIssued)) {
		return time.Time{}, false
	}
	var from time.Time
	if iat, _ := claims.GetIssuedAt(); iat != nil {
		from = iat.Time
	}
	if nbf, _ := claims.GetNotBefore(); nbf != nil && nbf.After(from) {
		from = nbf.Time
	}
	if from.IsZero() {
		return time.Time{}, false
	}
	at := v.cfg
	at.Now = func() time.Time { return from }
	then := jwt.NewValidator(claimChecks(at)...)
	if then.Validate(claims) != nil {
		return time.Time{}, false
	}
	return from, true
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

// verified maps the result of parse for a known kid.
func (v *JWTVerifier) verified(claims *contract.FireClaims, err error, body []byte, req contract.FireRequest) (*contract.FireClaims, *contract.Error) {
	if err != nil {
		if e := v.tooEarly(claims, err, body, req); e != nil {
			return nil, e
		}
		reason := parseReason(err)
		v.cfg.Logger.Warn("fireauth: fire token rejected", "job_id", req.JobID, "reason", reason, "error", err)
		return nil, reject(reason)
	}
	return claims, nil
}

// parse verifies token's signature with set and its registered claims,
// requiring the kid and typ headers. A kid the set lacks is errUnknownKID.
func (v *JWTVerifier) parse(ctx context.Context, set *keySet, token string) (*contract.FireClaims, error) {
	claims := &contract.FireClaims{}
	if handled, err := v.parseLean(set, token, claims, fireToken); handled {
		return claims, err
	}
	claims = &contract.FireClaims{}
	return claims, v.parseToken(ctx, set, token, claims, fireToken)
}

// tokenKind is what a kind of NAS token carries in its typ header, and the
// error that refuses a token of another typ.
type tokenKind struct {
	typ    string
	badTyp error
}

// The kinds of token NAS sends an agent.
var (
	fireToken      = tokenKind{typ: contract.TokenTypeCronFire, badTyp: errBadTyp}
	reconcileToken = tokenKind{typ: contract.TokenTypeCronReconcile, badTyp: errBadReconcileTyp}
)

// parseToken verifies token into claims with set: its signature, its
// registered claims, a kid header and the typ header of kind (kind.badTyp
// when it is another). A kid the set lacks is errUnknownKID.
func (v *JWTVerifier) parseToken(ctx context.Context, set *keySet, token string, claims jwt.Claims, kind tokenKind) error {
	keys := set.kf.KeyfuncCtx(ctx)
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if kid, ok := t.Header["kid"].(string); !ok || kid == "" {
			return nil, errNoKID
		}
		if got, _ := t.Header["typ"].(string); got != kind.typ {
			return nil, kind.badTyp
		}
		k, err := keys(t)
		if errors.Is(err, jwkset.ErrKeyNotFound) {
			return nil, errUnknownKID
		}
		return k, err
	})
	return err
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
		// A token only early is left to the signature check: once the
		// keys decide, it is 425, not refused.
		if _, early := v.validFrom(claims, err); !early {
			return parseReason(err)
		}
	}
	return v.checkClaims(claims, body, req)
}

// checkClaims applies the checks golang-jwt does not: returns "" when the
// claims are acceptable, else the reason.
func (v *JWTVerifier) checkClaims(c *contract.FireClaims, body []byte, req contract.FireRequest) string {
	if reason := v.checkEnvelope(c.Audience, c.IssuedAt, c.ExpiresAt, c.Purpose, contract.PurposeCronFire); reason != "" {
		return reason
	}
	switch {
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
	if !bodyHashMatches(c.BodyHash, body) {
		return "bh does not match the body"
	}
	return ""
}

// bodyHashLen is the length of contract.BodyHash's result: a SHA-256 in
// unpadded base64url.
const bodyHashLen = (sha256.Size*8 + 5) / 6

// bodyHashMatches reports whether bh equals contract.BodyHash(body),
// comparing in constant time as subtle.ConstantTimeCompare does, without
// building either as a heap string.
func bodyHashMatches(bh string, body []byte) bool {
	sum := sha256.Sum256(body)
	var want [bodyHashLen]byte
	base64.RawURLEncoding.Encode(want[:], sum[:])
	if len(bh) != len(want) {
		return false
	}
	var diff byte
	for i := range want {
		diff |= bh[i] ^ want[i]
	}
	return subtle.ConstantTimeByteEq(diff, 0) == 1
}

// checkEnvelope applies the checks every NAS token gets beyond golang-jwt's:
// the single expected aud, iat and exp present, a lifetime of at most
// MaxLifetime, and the purpose want. It returns "" or the reason.
func (v *JWTVerifier) checkEnvelope(aud string, iat, exp *jwt.NumericDate, purpose, want string) string {
	switch {
	case aud != v.cfg.Audience:
		return "aud does not name this agent"
	case iat == nil:
		return "iat is missing"
	case exp == nil:
		return "exp is missing"
	}
	life := exp.Sub(iat.Time)
	switch {
	case life <= 0:
		return "exp is not after iat"
	case life > v.cfg.MaxLifetime:
		return fmt.Sprintf("lifetime exp - iat is %s, more than %s", life, v.cfg.MaxLifetime)
	case purpose != want:
		return "purpose is not " + want
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
