package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// openRedisEngine opens the Redis relay engine for a redis:// store URL. It
// is set by the file that links the Redis engine in; nil means the binary
// was built without it.
var openRedisEngine func(ctx context.Context, url string, logger *slog.Logger) (relay.Engine, error)

func newNASCmd() *cobra.Command {
	var configPath string
	var printConfig bool
	c := &cobra.Command{
		Use:   "nas",
		Short: "Run the NAS service (API and, unless disabled, dispatchers)",
		Long: `Run the NAS service: the agent API, JWKS and health on listen; the relay
route, operator routes and metrics on relay_listen (or on listen when it is
empty); and relay.dispatchers dispatchers on the same store.

Fire tokens are signed with ES256 unless signing_alg says otherwise (many
agents' verifiers accept only RS and ES algorithms); with signing_keys_dir and
no signing_alg, the dir's signing key decides, so a dir of EdDSA keys keeps
signing as before. NAS refuses an operator_token shorter than 16 bytes and a
keys dir or key file that group or others may write.

Every config key can also be set in the environment as CHRONOS_NAS_<KEY>
(dots become underscores; lists are comma separated); a CHRONOS_NAS_ variable
that names no key is an error. A relative path in the config file is relative
to the file. --config defaults to CHRONOS_NAS_CONFIG. --print-config prints
the effective configuration with each key's variable, secrets redacted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkNASEnv(os.Environ()); err != nil {
				return asUsage(err)
			}
			if configPath == "" {
				configPath = os.Getenv(nasEnvPrefix + "CONFIG")
			}
			cfg, err := loadNASConfig(configPath, os.LookupEnv)
			if err != nil {
				return asUsage(err)
			}
			if printConfig {
				// An unset signing_alg is the keys dir's: show which, when
				// the dir can be read from here.
				if cfg.SigningAlg == "" && cfg.SigningKeysDir != "" {
					if set, err := nas.LoadKeyDir(cfg.SigningKeysDir, ""); err == nil {
						cfg.SigningAlg = set.Active.Alg
					}
				}
				out, err := printNASConfig(cfg)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			return runNAS(cmd.Context(), cfg, cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&configPath, "config", "", "YAML config file (env CHRONOS_NAS_CONFIG; keys may also come from CHRONOS_NAS_* variables)")
	c.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration and exit")
	c.AddCommand(newNASUnarmedCmd())
	return c
}

// newNASLogger returns a JSON logger on w at the configured log_level; a
// level that is not one of the four is a usage error naming the key.
func newNASLogger(w io.Writer, level string) (*slog.Logger, error) {
	l, err := parseLogLevel("log_level", level)
	if err != nil {
		return nil, err
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: durationText})), nil
}

// parseLogLevel reads a log level as NAS, relay and agent accept it: debug,
// info, warn or error, in any case. slog's offsets ("warn+2") are not
// accepted: they are no level an operator can look up. A bad level is a
// usage error naming key, the setting it came from.
func parseLogLevel(key, level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, usagef("%s: %q is not debug, info, warn or error", key, level)
}

// durationText writes a time.Duration attribute as a Go duration string
// ("276ms") instead of the JSON handler's integer nanoseconds: the rule for
// every duration in the logs of NAS, the relay and the agent (a key ending
// in a unit, such as lag_ms, carries a number in that unit instead). Call
// sites pass d.String() themselves, for loggers the binary does not build;
// this catches any that does not.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// openEngine opens the configured relay store.
func openEngine(ctx context.Context, store string, log *slog.Logger) (relay.Engine, error) {
	if store == "memory" {
		return memory.New(memory.Options{}), nil
	}
	if openRedisEngine == nil {
		return nil, fmt.Errorf("store %q: redis store not built in", store)
	}
	eng, err := openRedisEngine(ctx, store, log)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return eng, nil
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

// runNAS runs NAS until ctx ends (SIGTERM/interrupt), then shuts down.
func runNAS(ctx context.Context, cfg nas.Config, stderr io.Writer) error {
	log, err := newNASLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	keys, err := openKeys(&cfg, log)
	if err != nil {
		return err
	}
	verifier, err := openVerifier(ctx, cfg)
	if err != nil {
		return err
	}
	engine, err := openEngine(ctx, cfg.Store, log)
	if err != nil {
		return err
	}
	defer engine.Close()
	svc, err := nas.New(nas.Options{Config: cfg, Engine: engine, Verifier: verifier, Keys: keys, Logger: log})
	if err != nil {
		return err
	}
	defer svc.Close()
	srv := nashttp.NewServer(svc, nashttp.Options{Split: cfg.RelayListen != "", Logger: log})

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var relayLn net.Listener
	if cfg.RelayListen != "" {
		if relayLn, err = net.Listen("tcp", cfg.RelayListen); err != nil {
			ln.Close()
			return fmt.Errorf("relay_listen: %w", err)
		}
	}
	// A relay route on an ephemeral port (":0") is found where it really is.
	if routeLn, routeAddr := pick(relayLn, ln, cfg.RelayListen, cfg.Listen); strings.HasSuffix(routeAddr, ":0") {
		cfg.Relay.NASURL = "http://" + routeLn.Addr().String()
	}
	log.Info("nas started", "listen", ln.Addr().String(), "relay_listen", addrOf(relayLn),
		"public_url", cfg.PublicURL, "store", storeKind(cfg.Store), "signing_alg", cfg.SigningAlg,
		"kid", keys.Current().Active.KID, "dispatchers", *cfg.Relay.Dispatchers)

	var wg sync.WaitGroup
	// Room for every report: both listeners and each dispatcher send one.
	errc := make(chan error, 2+*cfg.Relay.Dispatchers)
	wg.Go(func() { errc <- srv.Serve(ctx, ln) })
	if relayLn != nil {
		wg.Go(func() { errc <- srv.ServeInternal(ctx, relayLn) })
	}
	wg.Go(func() { watchKeys(ctx, keys, cfg.KeyCheckInterval, log) })
	wg.Go(func() { svc.WatchUnarmed(ctx) })
	if n := *cfg.Relay.Dispatchers; n > 0 {
		deliverer, err := newDeliverer(cfg, log)
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		defer deliverer.Close()
		for range n {
			d := relay.NewDispatcher(engine, deliverer, relay.DispatcherConfig{Logger: log, Metrics: svc.Metrics().Relay(), Retry: cfg.Relay.Retry.Policy()})
			wg.Go(func() { errc <- d.Run(ctx) })
		}
	}
	return awaitStop(ctx, cancel, &wg, errc, log, "nas")
}

// newDeliverer builds the dispatchers' client of the relay route.
func newDeliverer(cfg nas.Config, log *slog.Logger) (*relay.HTTPDeliverer, error) {
	keys := make([][]byte, 0, len(cfg.Relay.Secrets))
	for _, s := range cfg.Relay.Secrets {
		k, err := contract.ParseWebhookSecret(s)
		if err != nil {
			return nil, fmt.Errorf("relay.secrets: %w", err)
		}
		keys = append(keys, k)
	}
	d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{
		NASURL: cfg.Relay.NASURL, Keys: keys, Logger: log,
		Timeout: cfg.DeliveryTimeout + 10*time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("relay deliverer: %w", err)
	}
	return d, nil
}

// watchKeys re-reads the signing keys dir on SIGHUP and every interval.
func watchKeys(ctx context.Context, keys *nas.KeyRing, every time.Duration, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-tick:
		}
		changed, err := keys.Reload()
		switch {
		case err != nil:
			log.Error("signing keys not reloaded; the previous keys stay in use", "error", err.Error())
		case changed:
			set := keys.Current()
			kids := make([]string, 0, len(set.Published))
			for _, k := range set.Published {
				kids = append(kids, k.KID)
			}
			log.Info("signing keys reloaded", "kid", set.Active.KID, "published", kids)
		}
	}
}

// pick returns the listener (and configured address) that serves the relay route.
func pick(relayLn, ln net.Listener, relayAddr, addr string) (net.Listener, string) {
	if relayLn != nil {
		return relayLn, relayAddr
	}
	return ln, addr
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// storeKind names the store without credentials a URL may carry.
func storeKind(store string) string {
	if store == "memory" {
		return store
	}
	return "redis"
}
