package fireauth

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

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
