package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	"github.com/chronoscron/chronos/relay/postgres"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// OpenEngine opens the relay store a store setting names: "memory"; a
// PostgreSQL URL (postgres:// or postgresql://, libpq's options and the
// engine's own schema= in the query; see relay/postgres.Open), whose schema
// must be at this binary's version; or for any other value the Redis
// engine, which takes redis://, rediss://, the Sentinel forms
// redis+sentinel://sentinel:26379?master_name=NAME and
// redis://sentinel:26379?master_name=NAME, and the Cluster forms
// redis+cluster://seed:7000?addr=seed2:7000 and redis://seed:7000?addr=seed2:7000,
// with the engine's own prefix= and shards= options in the query (see
// relay/redis.Open).
func OpenEngine(ctx context.Context, store string, log *slog.Logger) (relay.Engine, error) {
	return openEngine(ctx, store, false, log)
}

// OpenStore opens the relay store of cfg (its store, as OpenEngine does)
// and, with store_migrate, first brings a PostgreSQL store's schema up to
// this binary's version.
func OpenStore(ctx context.Context, cfg nas.Config, log *slog.Logger) (relay.Engine, error) {
	return openEngine(ctx, cfg.Store, cfg.StoreMigrate, log)
}

// openEngine is OpenEngine, migrating a PostgreSQL store first when
// migrate is set.
func openEngine(ctx context.Context, store string, migrate bool, log *slog.Logger) (relay.Engine, error) {
	switch {
	case store == "memory":
		return memory.New(memory.Options{}), nil
	case nas.IsPostgresURL(store):
		eng, err := postgres.Open(ctx, store, postgres.Options{Migrate: migrate, Logger: log})
		if errors.Is(err, postgres.ErrSchemaBehind) {
			return nil, fmt.Errorf("store (store_migrate is off): %w", err)
		}
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		return eng, nil
	}
	eng, err := relayredis.Open(ctx, store, relayredis.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return eng, nil
}

// Store kinds, as StoreKind names them in logs and benchmark results.
const (
	StoreMemory   = "memory"
	StoreRedis    = "redis"
	StorePostgres = "postgres"
)

// StoreKind names a store setting without the credentials a URL may carry:
// memory, redis or postgres.
func StoreKind(store string) string {
	switch {
	case store == "memory":
		return StoreMemory
	case nas.IsPostgresURL(store):
		return StorePostgres
	}
	return StoreRedis
}

// Migration is what MigrateStore did.
type Migration struct {
	// Store is the store's kind (StoreKind).
	Store string `json:"store"`
	// Schema is the PostgreSQL schema migrated; empty for a store without
	// one.
	Schema string `json:"schema,omitempty"`
	// From and To are the schema versions before and after; both 0 for a
	// store without a schema.
	From int `json:"from"`
	To   int `json:"to"`
	// Applied names the migrations applied, in order (NNNN_name).
	Applied []string `json:"applied"`
}

// String says what the migration did in one line: "schema chronos:
// version 0 → 2 (applied 0001_queue, 0002_records)", "schema chronos: at
// version 2, nothing to do", or for a store without a schema that there is
// nothing to migrate.
func (m Migration) String() string {
	switch {
	case m.Store != StorePostgres:
		return fmt.Sprintf("store %s: no schema, nothing to migrate", m.Store)
	case len(m.Applied) == 0:
		return fmt.Sprintf("schema %s: at version %d, nothing to do", m.Schema, m.To)
	}
	return fmt.Sprintf("schema %s: version %d → %d (applied %s)", m.Schema, m.From, m.To, strings.Join(m.Applied, ", "))
}

// MigrateStore brings the schema of a PostgreSQL store up to this binary's
// version and reports what it did; it is safe to run from several
// processes at once. A memory or Redis store has no schema: it reports
// that and touches nothing. A database whose schema is newer than the
// binary's is refused with an error wrapping postgres.ErrSchemaNewer.
func MigrateStore(ctx context.Context, store string, log *slog.Logger) (Migration, error) {
	m := Migration{Store: StoreKind(store), Applied: []string{}}
	if m.Store != StorePostgres {
		return m, nil
	}
	m.Schema = postgresSchema(store)
	res, err := postgres.Migrate(ctx, withoutPoolOptions(store), postgres.Options{Logger: log})
	m.From, m.To = res.From, res.To
	if res.Applied != nil {
		m.Applied = res.Applied
	}
	if err != nil {
		return m, fmt.Errorf("store: %w", err)
	}
	return m, nil
}

// withoutPoolOptions drops the connection pool's options (pool_max_conns
// and the other pool_*) from a PostgreSQL store URL: a migration runs on one
// connection, and the server knows no such parameters.
func withoutPoolOptions(store string) string {
	u, err := url.Parse(store)
	if err != nil {
		return store
	}
	q := u.Query()
	changed := false
	for k := range q {
		if strings.HasPrefix(k, "pool_") {
			q.Del(k)
			changed = true
		}
	}
	if !changed {
		return store
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// postgresSchema is the schema a PostgreSQL store URL names: its schema=
// option, else the engine's default.
func postgresSchema(store string) string {
	if u, err := url.Parse(store); err == nil {
		if s := u.Query().Get("schema"); s != "" {
			return s
		}
	}
	return postgres.DefaultSchema
}

// openKeys loads the signing keys dir, or makes an ephemeral key when none
// is configured. An unset signing_alg becomes the algorithm of the dir's
// signing key (cfg is updated).
func openKeys(cfg *nas.Config, log *slog.Logger) (*nas.KeyRing, error) {
	if cfg.SigningKeysDir == "" {
		log.Warn("signing_keys_dir is not set: using an ephemeral signing key (tokens stop verifying after a restart)")
		return nas.NewEphemeralKeyRing(cfg.SigningAlg)
	}
	ring, err := nas.OpenKeyRing(cfg.SigningKeysDir, cfg.SigningAlg)
	if err != nil {
		return nil, err
	}
	secretfile.Warn(log, ring.Current().Exposed...)
	if cfg.SigningAlg == "" {
		cfg.SigningAlg = ring.Alg()
		if cfg.SigningAlg != nas.DefaultSigningAlg {
			log.Info("signing_alg is not set: signing with the keys dir's "+cfg.SigningAlg+" key; set signing_alg to pin it",
				"signing_alg", cfg.SigningAlg)
		}
	}
	return ring, nil
}

// openVerifier builds the agent verifier from agents_file and agent_jwt: the
// agents file also maps the session ids of hosted agents' JWT access tokens.
func openVerifier(ctx context.Context, cfg nas.Config) (nas.AgentVerifier, error) {
	var m nas.MultiVerifier
	var file *nas.AgentsFile
	if cfg.AgentsFile != "" {
		f, err := nas.OpenAgentsFile(cfg.AgentsFile, 2*time.Second)
		if err != nil {
			return nil, err
		}
		m.Opaque, file = f, f
	}
	if cfg.AgentJWT.JWKSURL != "" {
		j, err := nas.NewJWTAgents(ctx, cfg.AgentJWT.Issuer, cfg.AgentJWT.Audience, cfg.AgentJWT.JWKSURL)
		if err != nil {
			return nil, err
		}
		j.SessionClaim = cfg.AgentJWT.SessionClaim
		if file != nil {
			j.Sessions = file
		}
		m.JWT = j
	}
	return m, nil
}

// newDeliverer builds the dispatchers' client of the relay route; maxConns
// 0 keeps the deliverer's default.
func newDeliverer(cfg nas.Config, log *slog.Logger, maxConns int) (*relay.HTTPDeliverer, error) {
	keys := make([][]byte, 0, len(cfg.Relay.Secrets))
	for _, s := range cfg.Relay.Secrets {
		k, err := contract.ParseWebhookSecret(s)
		if err != nil {
			return nil, fmt.Errorf("relay.secrets: %w", err)
		}
		keys = append(keys, k)
	}
	d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{
		NASURL: cfg.Relay.NASURL, Keys: keys, Logger: log, MaxConns: maxConns,
		Timeout: cfg.DeliveryTimeout + 10*time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("relay deliverer: %w", err)
	}
	return d, nil
}
