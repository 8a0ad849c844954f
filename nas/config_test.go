package nas_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

func validConfig() nas.Config {
	return nas.Config{
		PublicURL:  "https://nas.example.com",
		AgentsFile: "agents.yaml",
		Relay:      nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))}},
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := validConfig().WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]bool{
		"listen":              c.Listen == ":8080",
		"store":               c.Store == "memory",
		"signing_alg":         c.SigningAlg == nas.AlgES256,
		"session_claim":       c.AgentJWT.SessionClaim == "sid",
		"fire_token_ttl":      c.FireTokenTTL == 90*time.Second,
		"relay.dispatchers":   *c.Relay.Dispatchers == 1,
		"relay.nas_url":       c.Relay.NASURL == "http://127.0.0.1:8080",
		"max_armed_per_agent": c.Limits.MaxArmedPerAgent == 1000,
		"max_future":          c.Limits.MaxFuture == 400*24*time.Hour,
		"past_skew":           c.Limits.PastSkew == 30*time.Second,
		"delivery_timeout":    c.DeliveryTimeout == 30*time.Second,
		"log_level":           c.LogLevel == "info",
		"relay.retry":         c.Relay.Retry == nas.RetryConfig{MaxAttempts: 10, MaxAge: 24 * time.Hour, Base: time.Second, MaxDelay: 5 * time.Minute, MaxAuthAttempts: 4},
	}
	for k, ok := range checks {
		if !ok {
			t.Errorf("default of %s is wrong: %+v", k, c)
		}
	}
	split := validConfig()
	split.RelayListen = "0.0.0.0:9090"
	if got := split.WithDefaults().Relay.NASURL; got != "http://127.0.0.1:9090" {
		t.Errorf("nas_url from relay_listen: %s", got)
	}
	// With a keys dir, an unset algorithm stays unset: the dir's signing
	// key decides when the keys are loaded.
	withDir := validConfig()
	withDir.SigningKeysDir = "keys"
	if c := withDir.WithDefaults(); c.SigningAlg != "" || c.Validate() != nil {
		t.Errorf("signing_alg with a keys dir: %q %v", c.SigningAlg, c.Validate())
	}
	// Set keys keep their values through the defaults.
	set := validConfig()
	set.Relay.Retry.MaxAuthAttempts, set.AgentJWT.SessionClaim = 2, "session"
	if c := set.WithDefaults(); c.Relay.Retry.MaxAuthAttempts != 2 || c.AgentJWT.SessionClaim != "session" {
		t.Errorf("set keys lost: %+v", c)
	}
	zero := 0
	api := validConfig()
	api.Relay.Dispatchers = &zero
	if got := *api.WithDefaults().Relay.Dispatchers; got != 0 {
		t.Errorf("dispatchers 0 became %d", got)
	}
}

// TestRetryConfigPolicy: the relay.retry keys become the dispatchers' retry
// policy; unset keys keep the relay's defaults.
func TestRetryConfigPolicy(t *testing.T) {
	t.Parallel()
	p := nas.RetryConfig{MaxAttempts: 30, MaxAge: 6 * time.Hour}.Policy()
	if p.MaxAttempts != 30 || p.MaxAge != 6*time.Hour || p.Base != time.Second || p.MaxDelay != 5*time.Minute {
		t.Fatalf("policy %+v", p)
	}
}

func TestConfigValidateNamesTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		edit func(c *nas.Config)
	}{
		{"public_url", func(c *nas.Config) { c.PublicURL = "" }},
		{"public_url", func(c *nas.Config) { c.PublicURL = "nas.example.com" }},
		{"listen", func(c *nas.Config) { c.Listen = "8080" }},
		{"relay_listen", func(c *nas.Config) { c.RelayListen = "nope" }},
		{"relay_listen", func(c *nas.Config) { c.Listen, c.RelayListen = "127.0.0.1:8080", "127.0.0.1:8080" }},
		{"store", func(c *nas.Config) { c.Store = "mysql://x" }},
		{"store", func(c *nas.Config) { c.Store = "postgres://db/chronos?schema=Bad-Name" }},
		{"signing_alg", func(c *nas.Config) { c.SigningAlg = "HS256" }},
		{"fire_token_ttl", func(c *nas.Config) { c.FireTokenTTL = 10 * time.Minute }},
		{"relay.secrets", func(c *nas.Config) { c.Relay.Secrets = nil }},
		{"relay.secrets[0]", func(c *nas.Config) { c.Relay.Secrets = []string{"whsec_c2hvcnQ="} }},
		{"relay.nas_url", func(c *nas.Config) { c.Relay.NASURL = "ftp://x" }},
		{"agents_file or agent_jwt.jwks_url", func(c *nas.Config) { c.AgentsFile = "" }},
		{"agent_jwt.issuer", func(c *nas.Config) { c.AgentJWT.JWKSURL = "https://idp.example.com/jwks" }},
		{"limits.burst", func(c *nas.Config) { c.Limits.Burst = -1 }},
		{"limits.max_future", func(c *nas.Config) { c.Limits.MaxFuture = -time.Hour }},
		{"callback_allowlist", func(c *nas.Config) { c.CallbackAllowlist = []string{"10.0.0.0/99"} }},
		{"delivery_timeout", func(c *nas.Config) { c.DeliveryTimeout = -time.Second }},
		{"log_level", func(c *nas.Config) { c.LogLevel = "loud" }},
		{"relay.retry.max_attempts", func(c *nas.Config) { c.Relay.Retry.MaxAttempts = -1 }},
		{"relay.retry", func(c *nas.Config) { c.Relay.Retry.MaxAge = -time.Hour }},
		{"relay.retry.max_delay", func(c *nas.Config) { c.Relay.Retry.Base, c.Relay.Retry.MaxDelay = time.Minute, time.Second }},
		{"relay.retry.max_auth_attempts", func(c *nas.Config) { c.Relay.Retry.MaxAuthAttempts = -1 }},
		{"agent_jwt.session_claim", func(c *nas.Config) { c.AgentJWT.SessionClaim = "a b" }},
		{"operator_token", func(c *nas.Config) { c.OperatorToken = "x" }},
		{"operator_token", func(c *nas.Config) { c.OperatorToken = "fifteen-bytes!!" }},
	}
	for _, tt := range tests {
		c := validConfig()
		tt.edit(&c)
		err := c.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tt.key+":") {
			t.Errorf("%s: %v", tt.key, err)
		}
	}
}

// TestConfigStoreURLs: every Redis and PostgreSQL URL form the engines open
// is accepted, and anything else is refused by name, with what is wrong.
func TestConfigStoreURLs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		store string
		ok    bool
		why   string // in the error of a refused one
	}{
		{"memory", true, ""},
		{"redis://127.0.0.1:6379/0", true, ""},
		{"rediss://redis.internal:6380", true, ""},
		{"redis+cluster://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", true, ""},
		{"rediss+cluster://10.0.0.1:7000", true, ""},
		{"redis+sentinel://10.0.0.1:26379?master_name=main", true, ""},
		{"rediss+sentinel://10.0.0.1:26379?master_name=main", true, ""},
		{"postgres://chronos:pw@db.internal:5432/chronos", true, ""},
		{"postgresql://db.internal/chronos?sslmode=verify-full&schema=chronos_eu&pool_max_conns=32", true, ""},
		{"postgres://db1:5432,db2:5432/chronos?target_session_attrs=read-write", true, ""},
		{"postgres:///chronos?host=/run/postgresql", true, ""},
		{"postgres://db/chronos?schema=_t1", true, ""},
		{"redis+postgres://x", false, "neither memory"},
		{"cluster://x", false, "neither memory"},
		{"Memory", false, "neither memory"},
		{"pg://db/chronos", false, "PostgreSQL URL (postgres://, postgresql://)"},
		{"postgres://db/chronos?schema=Chronos", false, "schema="},
		{"postgres://db/chronos?schema=1st", false, "schema="},
		{"postgres://db/chronos?schema=a-b", false, "schema="},
		{"postgres://db/chronos?schema=" + strings.Repeat("s", 64), false, "schema="},
		{"postgres://db/chronos?pool_max_conns=0", false, "pool_max_conns="},
		{"postgres://db/chronos?pool_max_conns=many", false, "pool_max_conns="},
		{"postgres://db/chronos?sslmode=require;x", false, "query"},
		{"postgres://chronos:pw@db:port/chronos", false, "not a URL"},
		{"postgresql://db/%zz", false, "not a URL"},
	} {
		c := validConfig()
		c.Store = tt.store
		err := c.WithDefaults().Validate()
		if tt.ok && err != nil {
			t.Errorf("store %q: %v", tt.store, err)
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "store:") || !strings.Contains(err.Error(), tt.why)) {
			t.Errorf("store %q: got %v, want a store: error that says %q", tt.store, err, tt.why)
		}
		if err != nil && strings.Contains(err.Error(), ":pw@") {
			t.Errorf("store %q: the error shows the password: %v", tt.store, err)
		}
	}
}

// TestConfigStoreMigrate: store_migrate is off unless set, and valid with
// every store (only a PostgreSQL one has a schema to migrate).
func TestConfigStoreMigrate(t *testing.T) {
	t.Parallel()
	if c := validConfig().WithDefaults(); c.StoreMigrate {
		t.Error("store_migrate is on by default")
	}
	for _, store := range []string{"memory", "redis://127.0.0.1:6379/0", "postgres://db/chronos"} {
		c := validConfig()
		c.Store, c.StoreMigrate = store, true
		if err := c.WithDefaults().Validate(); err != nil {
			t.Errorf("store_migrate with %s: %v", store, err)
		}
	}
}

// TestIsPostgresURL: the two schemes of the PostgreSQL store, and nothing
// else.
func TestIsPostgresURL(t *testing.T) {
	t.Parallel()
	for store, want := range map[string]bool{
		"postgres://db/chronos": true, "postgresql://db/chronos": true, "postgres:///chronos": true,
		"memory": false, "redis://db": false, "Postgres://db": false, "postgres:db": false, "": false,
	} {
		if got := nas.IsPostgresURL(store); got != want {
			t.Errorf("IsPostgresURL(%q) = %v, want %v", store, got, want)
		}
	}
}

// TestConfigOperatorTokenLength: a token of MinOperatorTokenBytes passes,
// and no token at all (operator routes off) is fine.
func TestConfigOperatorTokenLength(t *testing.T) {
	t.Parallel()
	for tok, ok := range map[string]bool{"": true, "sixteen-bytes-ok": true, "fifteen-bytes!!": false} {
		c := validConfig()
		c.OperatorToken = tok
		if err := c.WithDefaults().Validate(); (err == nil) != ok {
			t.Errorf("operator token of %d bytes: %v", len(tok), err)
		}
	}
}

// TestConfigWarnings: plain http outside development is warned about (and
// still valid); https, or http in development, is not.
func TestConfigWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url     string
		private bool
		warn    bool
	}{
		{"http://nas.example.com", false, true},
		{"http://127.0.0.1:8080", true, false},
		{"https://nas.example.com", false, false},
	}
	for _, tt := range tests {
		c := validConfig()
		c.PublicURL, c.AllowPrivateCallbacks = tt.url, tt.private
		c = c.WithDefaults()
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tt.url, err)
		}
		w := c.Warnings()
		if got := len(w) > 0; got != tt.warn {
			t.Errorf("%s (allow_private_callbacks %v): warnings %q", tt.url, tt.private, w)
		}
		if tt.warn && !strings.Contains(w[0], "public_url") {
			t.Errorf("warning does not name the key: %q", w[0])
		}
	}
}
