package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// OpenEngine opens the relay store a store setting names: "memory", or for
// any other value the Redis engine, which takes redis://, rediss://, the
// Sentinel forms redis+sentinel://sentinel:26379?master_name=NAME and
// redis://sentinel:26379?master_name=NAME, and the Cluster forms
// redis+cluster://seed:7000?addr=seed2:7000 and redis://seed:7000?addr=seed2:7000,
// with the engine's own prefix= and shards= options in the query (see
// relay/redis.Open).
func OpenEngine(ctx context.Context, store string, log *slog.Logger) (relay.Engine, error) {
	if store == "memory" {
		return memory.New(memory.Options{}), nil
	}
	eng, err := relayredis.Open(ctx, store, relayredis.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return eng, nil
}

// StoreKind names a store setting without the credentials a URL may carry.
func StoreKind(store string) string {
	if store == "memory" {
		return store
	}
	return "redis"
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
