package nas

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// Signing algorithms of the cron_fire token. ES256 is the default: agents
// verify fire tokens with their own JWT library, and common ones (PyJWT-based
// verifiers among them) allow only RS and ES algorithms; EdDSA is for agents
// known to accept it.
const (
	AlgES256 = "ES256"
	AlgEdDSA = "EdDSA"
	AlgRS256 = "RS256"
)

// DefaultSigningAlg is the fire-token algorithm when signing_alg is not set
// and no keys dir says otherwise.
const DefaultSigningAlg = AlgES256

// MinOperatorTokenBytes is the shortest operator token NAS accepts: the
// operator routes can cancel every agent's jobs, so a guessable token is
// refused rather than used.
const MinOperatorTokenBytes = 16

// Config is the configuration of one NAS process. Every key can be set in the
// YAML file or from the environment as CHRONOS_NAS_<KEY> with dots turned into
// underscores (relay.secrets → CHRONOS_NAS_RELAY_SECRETS, lists comma
// separated); LoadConfig reads both. Each secret (operator_token,
// relay.secrets, store) can instead be read from the file its *_file key
// names. A relative file path in the YAML file is relative to that file's
// directory; one from the environment, to the working directory. Field
// comments state each default; WithDefaults fills them and Validate checks the
// result with messages that name the key.
type Config struct {
	// Listen is the address of the agent-facing listener (API, JWKS,
	// health). Default ":8080".
	Listen string `yaml:"listen"`
	// RelayListen, when set, is an internal listener that alone serves the
	// relay route, the operator routes and /metrics. Empty: they are served on
	// Listen. Default "".
	RelayListen string `yaml:"relay_listen"`
	// PublicURL is NAS's public base URL: the `iss` of fire tokens, exactly
	// as written (agents compare it with their portal_url), and JWKS is at
	// {public_url}/.well-known/jwks.json. Required.
	PublicURL string `yaml:"public_url"`
	// Store is "memory" (the embedded engine), a Redis URL: redis:// or
	// rediss:// for one node, redis+cluster://seed:7000?addr=seed2:7000 for a
	// Cluster, redis+sentinel://host:26379?master_name=NAME for Sentinel
	// (rediss+ for TLS), or a PostgreSQL URL: postgres:// or postgresql://,
	// with libpq's options and the engine's own schema= in the query.
	// Default "memory".
	Store string `yaml:"store"`
	// StoreFile reads Store from a file (trimmed), for a store URL that
	// holds a password. Setting both is an error. Default "".
	StoreFile string `yaml:"store_file"`
	// StoreMigrate runs the pending schema migrations of a PostgreSQL store
	// when the process starts, as `chronos nas migrate` does (safe from
	// several processes at once). Off, a process refuses to start on a
	// schema older than its binary's and names the command to run. Other
	// stores have no schema and ignore it. Default false.
	StoreMigrate bool `yaml:"store_migrate"`
	// SigningKeysDir holds the PEM signing keys (see `chronos keys generate`)
	// and an optional file `active` naming the signing kid. Empty: an
	// ephemeral key is generated at start (development only). Default "".
	SigningKeysDir string `yaml:"signing_keys_dir"`
	// SigningAlg is the fire-token algorithm: ES256, EdDSA or RS256. Unset
	// with a signing_keys_dir, the dir's signing key decides (the key its
	// `active` file names; without one, the oldest ES256 key, else the
	// oldest EdDSA key, else RS256), so a keys dir made for another
	// algorithm keeps signing as before. Default "ES256".
	SigningAlg string `yaml:"signing_alg"`
	// KeyCheckInterval is how often the keys dir is checked for changes (it
	// is also re-read on SIGHUP). Default 30s.
	KeyCheckInterval time.Duration `yaml:"key_check_interval"`
	// FireTokenTTL is exp - iat of fire tokens, 60s to 120s. Default 90s.
	FireTokenTTL time.Duration `yaml:"fire_token_ttl"`
	// Relay configures the relay: its secrets and dispatchers.
	Relay RelayConfig `yaml:"relay"`
	// AgentsFile is a YAML list of agents (agent_id, instance_id, and
	// token_sha256 and/or session_id) for self-hosting. Default "" (none).
	AgentsFile string `yaml:"agents_file"`
	// AgentJWT accepts JWT access tokens from an issuer. Default: disabled.
	AgentJWT AgentJWTConfig `yaml:"agent_jwt"`
	// Limits are per-agent limits.
	Limits LimitsConfig `yaml:"limits"`
	// AllowPrivateCallbacks lets callbacks reach loopback, private and
	// link-local addresses (never the cloud metadata address). Development
	// only. Default false.
	AllowPrivateCallbacks bool `yaml:"allow_private_callbacks"`
	// CallbackAllowlist lists CIDRs (10.0.0.0/8) and host names
	// (agent.internal) callbacks may reach even though they are private.
	// Default empty.
	CallbackAllowlist []string `yaml:"callback_allowlist"`
	// OperatorToken guards the operator routes (bearer), at least
	// MinOperatorTokenBytes long. Empty: the operator routes do not exist.
	// Default "".
	OperatorToken string `yaml:"operator_token"`
	// OperatorTokenFile reads OperatorToken from a file (trimmed). Setting
	// both is an error. Default "".
	OperatorTokenFile string `yaml:"operator_token_file"`
	// DeliveryTimeout bounds the whole call to an agent. Default 30s.
	DeliveryTimeout time.Duration `yaml:"delivery_timeout"`
	// FailedFiresRetention is how long a dead-lettered fire stays in its
	// agent's failed_fires (on list) when the agent does not acknowledge it.
	// Default 168h (7 days).
	FailedFiresRetention time.Duration `yaml:"failed_fires_retention"`
	// UnarmedAfter is how long a job may stay without an armed fire after
	// its last fire was delivered, dropped (instance stopped) or
	// dead-lettered before NAS reports it (chronos_nas_unarmed_jobs, the
	// operator route, a warn log line). Default 10m.
	UnarmedAfter time.Duration `yaml:"unarmed_after"`
	// LogLevel is debug, info, warn or error. Default "info".
	LogLevel string `yaml:"log_level"`

	// exposed are the secret files LoadConfig read that their group or
	// others may read (see ExposedSecretFiles).
	exposed []secretfile.Exposure
	// sealer seals and opens cron keys under
	// relay.cron_key_encryption_key_file, once LoadConfig read it (see
	// CronKeySealer).
	sealer *cronkey.Sealer
}

// RelayConfig configures the relay side of NAS.
type RelayConfig struct {
	// Secrets are Standard Webhooks secrets (whsec_ + base64): the first
	// signs relay calls, all verify. Required (at least one).
	Secrets []string `yaml:"secrets"`
	// SecretsFile reads Secrets from a file, one per line (trimmed; lines
	// starting with # are comments). Setting both is an error. Default "".
	SecretsFile string `yaml:"secrets_file"`
	// Dispatchers is how many dispatchers `chronos nas` runs in process; 0
	// serves the API only. Default 1.
	Dispatchers *int `yaml:"dispatchers"`
	// NASURL is the base URL dispatchers POST the relay route to. Default:
	// http:// + relay_listen, else http:// + listen (a wildcard host becomes
	// 127.0.0.1).
	NASURL string `yaml:"nas_url"`
	// Retry bounds how long dispatchers retry a fire that fails before it
	// goes to the dead letter.
	Retry RetryConfig `yaml:"retry"`
	// PerAgent bounds what one agent gets of the dispatchers, over every
	// NAS and relay process sharing the store; an agent's own entry in the
	// agents file overrides it.
	PerAgent PerAgentConfig `yaml:"per_agent"`
	// MisfireGrace is how late after its fire_at a fire may still be
	// delivered: a fire held back longer (its agent disabled, or not
	// answering) is dead-lettered instead when it is claimed, so its agent
	// learns of it as a failed fire. Default: relay.retry.max_age.
	MisfireGrace time.Duration `yaml:"misfire_grace"`
	// CronKeyEncryptionKeyFile names the file of the key that seals the
	// cron keys of direct delivery in the store (32 bytes in base64 or
	// hex; make one with `head -c 32 /dev/urandom | base64`), mode 0600:
	// a file its group or others may read is refused. NAS seals each
	// key with it at provision, and every dispatcher (NAS's and chronos
	// relay's) opens it to sign a direct fire. Required when the agents
	// file allows any agent direct delivery. Default "".
	CronKeyEncryptionKeyFile string `yaml:"cron_key_encryption_key_file"`
	// CronKeyMaxAge is how long a job's cron key is kept: the first
	// provision of the job after it gets a new key. Positive. Default
	// 720h (30 days).
	CronKeyMaxAge time.Duration `yaml:"cron_key_max_age"`
}

// PerAgentConfig is the dispatchers' flow control per agent (see
// relay.Flow): how many of one agent's fires are in flight at once and how
// fast they go out.
type PerAgentConfig struct {
	// Parallelism bounds the deliveries in flight to one agent, at least 1.
	// Default 4.
	Parallelism *int `yaml:"parallelism"`
	// Rate bounds the deliveries per second to one agent, a positive
	// number (0.5: one every two seconds). Default: unset, unlimited.
	Rate *float64 `yaml:"rate"`
}

// RetryConfig is the dispatchers' retry ladder: exponential backoff with
// jitter from Base up to MaxDelay per step (an agent's Retry-After is a floor),
// for at most MaxAttempts deliveries and MaxAge after fire_at. A scale-to-zero
// agent that may stay down for long wants a larger MaxAttempts; the slots it
// misses are recorded by its misfire policy when it is back.
type RetryConfig struct {
	// MaxAttempts is how many deliveries one fire gets. Default 10.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxAge is how long after fire_at a fire is still retried. Default 24h.
	MaxAge time.Duration `yaml:"max_age"`
	// Base is the first backoff step. Default 1s.
	Base time.Duration `yaml:"base"`
	// MaxDelay caps one backoff step. Default 5m.
	MaxDelay time.Duration `yaml:"max_delay"`
	// MaxAuthAttempts is how many deliveries one fire gets while the agent
	// refuses its token (401, 403): a key-set race on the agent heals within
	// a few retries, a permanent misconfiguration (a wrong audience) ends in
	// the dead letter with the agent's answer as the reason. Enforced by the
	// relay route, so it holds whichever process dispatches; MaxAttempts still
	// caps it. Default 4.
	MaxAuthAttempts int `yaml:"max_auth_attempts"`
}

// Dispatch returns the settings every dispatcher of NAS and of `chronos
// relay` runs with: the retry ladder, the per-agent flow control and the
// misfire grace (after WithDefaults). The caller adds its own logger,
// metrics and tuning.
func (r RelayConfig) Dispatch() relay.DispatcherConfig {
	d := relay.DispatcherConfig{Retry: r.Retry.Policy(), MisfireGrace: r.MisfireGrace}
	if r.PerAgent.Parallelism != nil {
		d.PerAgent = *r.PerAgent.Parallelism
	}
	if r.PerAgent.Rate != nil {
		d.PerAgentRate = *r.PerAgent.Rate
	}
	return d
}

// Flow is the default flow control of an agent whose own policy leaves a
// field unset: relay.per_agent.*.
func (r RelayConfig) Flow() relay.Flow {
	d := r.Dispatch()
	return relay.Flow{Parallelism: d.PerAgent, Rate: d.PerAgentRate}
}

// Policy returns the relay retry policy these settings describe; unset
// fields take the relay's defaults.
func (r RetryConfig) Policy() relay.RetryPolicy {
	return relay.RetryPolicy{MaxAttempts: r.MaxAttempts, MaxAge: r.MaxAge, Base: r.Base, MaxDelay: r.MaxDelay}.WithDefaults()
}

// AgentJWTConfig accepts JWT access tokens as agent credentials: `sub` is the
// agent id and the `instance_id` claim the instance; a token without an
// instance claim (a hosted agent's access token) is mapped through its
// session claim to the agents_file entry with that session_id.
type AgentJWTConfig struct {
	// Issuer is the expected `iss`. Required when JWKSURL is set.
	Issuer string `yaml:"issuer"`
	// JWKSURL is the issuer's JWKS. Empty disables JWT access tokens.
	JWKSURL string `yaml:"jwks_url"`
	// Audience is the expected `aud`. Required when JWKSURL is set.
	Audience string `yaml:"audience"`
	// SessionClaim names the claim holding the session id that agents_file
	// entries map with session_id. Default "sid".
	SessionClaim string `yaml:"session_claim"`
}

// LimitsConfig are per-agent limits.
type LimitsConfig struct {
	// MaxArmedPerAgent is the armed-job quota of one agent. Default 1000.
	MaxArmedPerAgent int `yaml:"max_armed_per_agent"`
	// RatePerSecond is the sustained API call rate of one agent. Default 20.
	RatePerSecond float64 `yaml:"rate_per_second"`
	// Burst is the token bucket size of one agent. Default 100.
	Burst int `yaml:"burst"`
	// MaxFuture is how far ahead a fire_at may be. Default 400 days (9600h).
	MaxFuture time.Duration `yaml:"max_future"`
	// PastSkew is how far in the past a fire_at may be. Default 30s.
	PastSkew time.Duration `yaml:"past_skew"`
}

// Defaults.
const (
	DefaultListen           = ":8080"
	DefaultStore            = "memory"
	DefaultKeyCheckInterval = 30 * time.Second
	DefaultFireTokenTTL     = 90 * time.Second
	DefaultDispatchers      = 1
	DefaultMaxArmed         = 1000
	DefaultRatePerSecond    = 20
	DefaultBurst            = 100
	DefaultMaxFuture        = 400 * 24 * time.Hour
	DefaultPastSkew         = contract.DefaultFireAtPastSkewSec * time.Second
	DefaultDeliveryTimeout  = 30 * time.Second
	// DefaultFailedFiresRetention is the default of failed_fires_retention.
	DefaultFailedFiresRetention = 7 * 24 * time.Hour
	DefaultLogLevel             = "info"
	DefaultMaxAuthAttempts      = 4
	DefaultSessionClaim         = "sid"
	DefaultUnarmedAfter         = 10 * time.Minute
	// DefaultPerAgentParallelism is the default of
	// relay.per_agent.parallelism.
	DefaultPerAgentParallelism = 4
	// DefaultCronKeyMaxAge is the default of relay.cron_key_max_age.
	DefaultCronKeyMaxAge = 30 * 24 * time.Hour
)

// WithDefaults returns a copy of c with every unset key at its default.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Store == "" {
		c.Store = DefaultStore
	}
	if c.SigningAlg == "" && c.SigningKeysDir == "" {
		// With a keys dir, an unset algorithm is the dir's (see SigningAlg).
		c.SigningAlg = DefaultSigningAlg
	}
	if c.KeyCheckInterval == 0 {
		c.KeyCheckInterval = DefaultKeyCheckInterval
	}
	if c.FireTokenTTL == 0 {
		c.FireTokenTTL = DefaultFireTokenTTL
	}
	if p := c.Relay.Retry.Policy(); c.Relay.Retry.MaxAttempts >= 0 && c.Relay.Retry.MaxAge >= 0 && c.Relay.Retry.Base >= 0 && c.Relay.Retry.MaxDelay >= 0 {
		c.Relay.Retry = RetryConfig{MaxAttempts: p.MaxAttempts, MaxAge: p.MaxAge, Base: p.Base, MaxDelay: p.MaxDelay, MaxAuthAttempts: c.Relay.Retry.MaxAuthAttempts}
	}
	if c.Relay.Retry.MaxAuthAttempts == 0 {
		c.Relay.Retry.MaxAuthAttempts = DefaultMaxAuthAttempts
	}
	if c.Relay.PerAgent.Parallelism == nil {
		n := DefaultPerAgentParallelism
		c.Relay.PerAgent.Parallelism = &n
	}
	if c.Relay.CronKeyMaxAge == 0 {
		c.Relay.CronKeyMaxAge = DefaultCronKeyMaxAge
	}
	if c.Relay.MisfireGrace == 0 && c.Relay.Retry.MaxAge > 0 {
		c.Relay.MisfireGrace = c.Relay.Retry.MaxAge
	}
	if c.AgentJWT.SessionClaim == "" {
		c.AgentJWT.SessionClaim = DefaultSessionClaim
	}
	if c.Relay.Dispatchers == nil {
		n := DefaultDispatchers
		c.Relay.Dispatchers = &n
	}
	if c.Relay.NASURL == "" {
		addr := c.RelayListen
		if addr == "" {
			addr = c.Listen
		}
		c.Relay.NASURL = baseURLFor(addr)
	}
	if c.Limits.MaxArmedPerAgent == 0 {
		c.Limits.MaxArmedPerAgent = DefaultMaxArmed
	}
	if c.Limits.RatePerSecond == 0 {
		c.Limits.RatePerSecond = DefaultRatePerSecond
	}
	if c.Limits.Burst == 0 {
		c.Limits.Burst = DefaultBurst
	}
	if c.Limits.MaxFuture == 0 {
		c.Limits.MaxFuture = DefaultMaxFuture
	}
	if c.Limits.PastSkew == 0 {
		c.Limits.PastSkew = DefaultPastSkew
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if c.FailedFiresRetention == 0 {
		c.FailedFiresRetention = DefaultFailedFiresRetention
	}
	if c.UnarmedAfter == 0 {
		c.UnarmedAfter = DefaultUnarmedAfter
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	return c
}

// baseURLFor turns a listen address into an http base URL on which the
// listener can be reached from the same host.
func baseURLFor(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Validate checks a config after WithDefaults; each message names the key.
func (c Config) Validate() error {
	return errors.Join(c.validate(), c.validateCredentialSource())
}

// problems collects the findings of a validation.
type problems []error

// add records one finding.
func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// validate checks every key except the agent credential source, which is
// not needed when a verifier is supplied in code.
func (c Config) validate() error {
	var p problems
	c.validateListeners(&p)
	c.validateSigning(&p)
	c.Relay.validate(&p)
	c.AgentJWT.validate(&p)
	c.Limits.validate(&p)
	c.validateDelivery(&p)
	return errors.Join(p...)
}

// validateCredentialSource asks for at least one agent credential source.
func (c Config) validateCredentialSource() error {
	if c.AgentsFile == "" && c.AgentJWT.JWKSURL == "" {
		return errors.New("agents_file or agent_jwt.jwks_url: at least one agent credential source is required")
	}
	return nil
}

// isHTTPURL reports whether s is an absolute http(s) URL.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// validateListeners checks listen, relay_listen, public_url, store and
// log_level.
func (c Config) validateListeners(p *problems) {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		p.add("listen: %q is not host:port", c.Listen)
	}
	if c.RelayListen != "" {
		if _, port, err := net.SplitHostPort(c.RelayListen); err != nil {
			p.add("relay_listen: %q is not host:port", c.RelayListen)
		} else if c.RelayListen == c.Listen && port != "0" {
			p.add("relay_listen: %q is also listen; the internal listener needs its own address", c.RelayListen)
		}
	}
	if c.PublicURL == "" {
		p.add("public_url: required (the issuer of fire tokens)")
	} else if !isHTTPURL(c.PublicURL) {
		p.add("public_url: %q is not an absolute http(s) URL", c.PublicURL)
	}
	switch {
	case c.Store == "memory", isRedisURL(c.Store):
	case IsPostgresURL(c.Store):
		if err := checkPostgresURL(c.Store); err != nil {
			p.add("store: %q: %v", c.Redacted().Store, err)
		}
	default:
		p.add("store: %q is neither memory, a Redis URL (redis://, rediss://, redis+cluster://, rediss+cluster://, redis+sentinel://, rediss+sentinel://) nor a PostgreSQL URL (postgres://, postgresql://)", c.Redacted().Store)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		p.add("log_level: %q is not debug, info, warn or error", c.LogLevel)
	}
}

// redisSchemes are the URL schemes of the Redis store: one node, a Cluster
// and Sentinel, each in the clear or over TLS (see relay/redis.Open).
var redisSchemes = []string{"redis://", "rediss://", "redis+cluster://", "rediss+cluster://", "redis+sentinel://", "rediss+sentinel://"}

// isRedisURL reports whether store is a URL of one of redisSchemes.
func isRedisURL(store string) bool {
	for _, s := range redisSchemes {
		if strings.HasPrefix(store, s) {
			return true
		}
	}
	return false
}

// postgresSchemes are the URL schemes of the PostgreSQL store (see
// relay/postgres.Open).
var postgresSchemes = []string{"postgres://", "postgresql://"}

// IsPostgresURL reports whether store names the PostgreSQL store: a
// postgres:// or postgresql:// URL.
func IsPostgresURL(store string) bool {
	for _, s := range postgresSchemes {
		if strings.HasPrefix(store, s) {
			return true
		}
	}
	return false
}

// postgresSchemaName is what the engine's schema= option may be: a plain
// lower-case identifier (see relay/postgres.Options.Schema).
var postgresSchemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// checkPostgresURL finds what would keep a PostgreSQL store URL from
// opening: a URL that does not parse, a bad schema= or pool_max_conns.
// Host and database may be left to libpq's defaults (PGHOST, the local
// socket), as psql allows.
func checkPostgresURL(store string) error {
	u, err := url.Parse(store)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text would repeat the URL, password and all
		}
		return fmt.Errorf("not a URL: %w", err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fmt.Errorf("its query: %w", err)
	}
	if q.Has("schema") && !postgresSchemaName.MatchString(q.Get("schema")) {
		return fmt.Errorf("schema=%q: want lower-case letters, digits and _ (at most 63, not starting with a digit)", q.Get("schema"))
	}
	if q.Has("pool_max_conns") {
		if n, err := strconv.Atoi(q.Get("pool_max_conns")); err != nil || n < 1 {
			return fmt.Errorf("pool_max_conns=%q: want a positive number of connections", q.Get("pool_max_conns"))
		}
	}
	return nil
}

// validateSigning checks the fire-token settings and the operator token.
func (c Config) validateSigning(p *problems) {
	switch c.SigningAlg {
	case AlgES256, AlgEdDSA, AlgRS256:
	case "":
		if c.SigningKeysDir == "" {
			p.add("signing_alg: required without signing_keys_dir (ES256, EdDSA or RS256)")
		}
	default:
		p.add("signing_alg: %q is not ES256, EdDSA or RS256", c.SigningAlg)
	}
	if c.KeyCheckInterval < 0 {
		p.add("key_check_interval: must not be negative")
	}
	if c.FireTokenTTL < 60*time.Second || c.FireTokenTTL > contract.MaxFireTokenLifetimeSeconds*time.Second {
		p.add("fire_token_ttl: %s is outside 60s..120s", c.FireTokenTTL)
	}
	if n := len(c.OperatorToken); n > 0 && n < MinOperatorTokenBytes {
		p.add("operator_token: the token (from operator_token or operator_token_file) is %d bytes; the operator routes need at least %d (make one with `head -c 24 /dev/urandom | base64`)", n, MinOperatorTokenBytes)
	}
}

// validate checks the relay section.
func (r RelayConfig) validate(p *problems) {
	if len(r.Secrets) == 0 {
		p.add("relay.secrets: at least one whsec_ secret is required")
	}
	for i, s := range r.Secrets {
		if _, err := contract.ParseWebhookSecret(s); err != nil {
			p.add("relay.secrets[%d]: %v", i, err)
		}
	}
	if r.Dispatchers != nil && *r.Dispatchers < 0 {
		p.add("relay.dispatchers: must not be negative")
	}
	switch rt := r.Retry; {
	case rt.MaxAttempts < 0:
		p.add("relay.retry.max_attempts: must not be negative")
	case rt.MaxAge < 0, rt.Base < 0, rt.MaxDelay < 0:
		p.add("relay.retry: durations must not be negative")
	case rt.MaxAuthAttempts < 0:
		p.add("relay.retry.max_auth_attempts: must not be negative")
	default:
		if pol := rt.Policy(); pol.MaxDelay < pol.Base {
			p.add("relay.retry.max_delay: %s must be at least relay.retry.base %s", pol.MaxDelay, pol.Base)
		}
	}
	if r.NASURL != "" && !isHTTPURL(r.NASURL) {
		p.add("relay.nas_url: %q is not an absolute http(s) URL", r.NASURL)
	}
	if n := r.PerAgent.Parallelism; n != nil && *n < 1 {
		p.add("relay.per_agent.parallelism: %d must be at least 1 (the deliveries in flight to one agent)", *n)
	}
	if v := r.PerAgent.Rate; v != nil && !(*v > 0 && !math.IsInf(*v, 0)) {
		p.add("relay.per_agent.rate: %v must be a positive number of deliveries per second (leave it unset for no limit)", *v)
	}
	if r.MisfireGrace < 0 {
		p.add("relay.misfire_grace: %s must not be negative", r.MisfireGrace)
	}
	if r.CronKeyMaxAge < 0 {
		p.add("relay.cron_key_max_age: %s must be positive (how long a job's cron key of direct delivery is kept)", r.CronKeyMaxAge)
	}
}

// validate checks the agent_jwt section.
func (a AgentJWTConfig) validate(p *problems) {
	if a.JWKSURL != "" {
		if !isHTTPURL(a.JWKSURL) {
			p.add("agent_jwt.jwks_url: %q is not an absolute http(s) URL", a.JWKSURL)
		}
		if a.Issuer == "" {
			p.add("agent_jwt.issuer: required with agent_jwt.jwks_url")
		}
		if a.Audience == "" {
			p.add("agent_jwt.audience: required with agent_jwt.jwks_url")
		}
	}
	if n := len(a.SessionClaim); n > 64 || strings.ContainsAny(a.SessionClaim, " \t\r\n") {
		p.add("agent_jwt.session_claim: %q is not a claim name", a.SessionClaim)
	}
}

// validate checks the limits section.
func (l LimitsConfig) validate(p *problems) {
	if l.MaxArmedPerAgent < 0 {
		p.add("limits.max_armed_per_agent: must not be negative")
	}
	if l.RatePerSecond < 0 {
		p.add("limits.rate_per_second: must not be negative")
	}
	if l.Burst < 1 {
		p.add("limits.burst: must be at least 1")
	}
	if l.MaxFuture <= 0 {
		p.add("limits.max_future: must be positive")
	}
	if l.PastSkew < 0 {
		p.add("limits.past_skew: must not be negative")
	}
}

// validateDelivery checks the callback and delivery settings.
func (c Config) validateDelivery(p *problems) {
	if _, err := ParseAllowlist(c.CallbackAllowlist); err != nil {
		p.add("callback_allowlist: %v", err)
	}
	if c.DeliveryTimeout <= 0 {
		p.add("delivery_timeout: must be positive")
	}
	if c.FailedFiresRetention <= 0 {
		p.add("failed_fires_retention: must be positive")
	}
	if c.UnarmedAfter < time.Second {
		p.add("unarmed_after: %s must be at least 1s", c.UnarmedAfter)
	}
}

// Warnings lists settings that are accepted but weak outside development,
// each naming its key, for the log at start.
func (c Config) Warnings() []string {
	var out []string
	if u, err := url.Parse(c.PublicURL); err == nil && u.Scheme == "http" && !c.AllowPrivateCallbacks {
		out = append(out, fmt.Sprintf("public_url: %s is plain http while allow_private_callbacks is off (not development): "+
			"agents that reach NAS there send their access tokens and fetch NAS's signing keys unencrypted; serve NAS over https", c.PublicURL))
	}
	return out
}

// ParseAllowlist parses callback_allowlist entries: a CIDR, a single IP, or a
// host name.
func ParseAllowlist(entries []string) (agentcall.Allowlist, error) {
	return agentcall.ParseAllowlist(entries)
}
