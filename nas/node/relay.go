package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/internal/systemd"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
	"github.com/chronoscron/chronos/relay/direct"
	relaymetrics "github.com/chronoscron/chronos/relay/metrics"
)

// RelayOptions configure a dispatchers-only relay process.
type RelayOptions struct {
	// Config is NAS's configuration: the relay uses its store, relay.secrets,
	// relay.nas_url, relay.dispatchers, relay.retry, relay.per_agent,
	// relay.misfire_grace and, for direct fires, public_url (the tokens'
	// iss), relay.cron_key_encryption_key_file, allow_private_callbacks,
	// callback_allowlist and delivery_timeout.
	Config nas.Config
	// Logger receives the relay's logs.
	Logger *slog.Logger
	// Listen is the address of /healthz, /readyz and /metrics; "" for none.
	Listen string
	// Lease is the lease per claim; 0 keeps the dispatcher's default.
	Lease time.Duration
	// CronKeyEncryptionKeyFile, when set, overrides
	// relay.cron_key_encryption_key_file: the key the relay opens direct
	// fires' cron keys with (NAS's, the one it seals them with).
	CronKeyEncryptionKeyFile string
}

// Validate refuses settings a relay process cannot run with: the memory
// store (it lives inside one process), no dispatcher, a lease under 100ms.
func (o RelayOptions) Validate() error {
	cfg := o.Config.WithDefaults()
	switch {
	case cfg.Store == "memory":
		return errors.New("relay: store is memory; chronos relay needs the shared store of the NAS processes (a redis:// or postgres:// URL)")
	case *cfg.Relay.Dispatchers < 1:
		return fmt.Errorf("relay: relay.dispatchers is %d; a relay process needs at least 1", *cfg.Relay.Dispatchers)
	case o.Lease != 0 && o.Lease < 100*time.Millisecond:
		return fmt.Errorf("relay: --lease %s is shorter than 100ms", o.Lease)
	}
	return nil
}

// RunRelay runs relay.dispatchers dispatchers on the configured store,
// delivering to NAS's signed relay route, until ctx ends; then it drains
// them. A fire armed for direct delivery is delivered to its agent by the
// relay itself (relay/direct), signed under the job's cron key, which it
// opens with relay.cron_key_encryption_key_file; iss is public_url, as in
// NAS's own tokens. It tells the service manager it is ready once the health listener
// (if any) is bound, with the store check of /readyz feeding its watchdog.
func RunRelay(ctx context.Context, o RelayOptions) error {
	cfg, log := o.Config.WithDefaults(), o.Logger
	secretfile.Warn(log, cfg.ExposedSecretFiles()...)
	sealer, err := o.cronKeySealer(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	engine, err := OpenStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer engine.Close()
	deliverer, closeDeliverer, err := NewRelayDeliverer(cfg, sealer, engine, log, 0)
	if err != nil {
		return err
	}
	defer closeDeliverer()
	metrics := relaymetrics.NewDispatch()
	g := newGroup(ctx, cancel, log, "relay")
	if o.Listen != "" {
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return fmt.Errorf("relay: listen: %w", err)
		}
		log.Info("relay health and metrics", "listen", ln.Addr().String())
		serveOps(g, ln, opsServer(engine, metrics))
	}
	log.Info("relay started", "store", StoreKind(cfg.Store), "nas_url", cfg.Relay.NASURL, "dispatchers", *cfg.Relay.Dispatchers,
		"direct_delivery", sealer != nil)
	deliverer = recordHistory(ctx, g, engine, deliverer, "relay", *cfg.Relay.Dispatchers, log)
	for range *cfg.Relay.Dispatchers {
		dc := cfg.Relay.Dispatch()
		dc.Logger, dc.Metrics, dc.LeaseFor = log, metrics, o.Lease
		d := relay.NewDispatcher(engine, deliverer, dc)
		g.goErr(func() error { return d.Run(ctx) })
	}
	systemd.Ready(ctx, log, storeAlive(engine))
	return g.wait()
}

// cronKeySealer loads the encryption key of direct fires' cron keys: the
// --cron-key-encryption-key-file when given, else
// relay.cron_key_encryption_key_file; nil when neither is set.
func (o RelayOptions) cronKeySealer(cfg nas.Config) (*cronkey.Sealer, error) {
	if o.CronKeyEncryptionKeyFile == "" {
		s, err := cfg.CronKeySealer()
		if err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		return s, nil
	}
	s, err := cronkey.LoadSealer(o.CronKeyEncryptionKeyFile)
	if err != nil {
		return nil, fmt.Errorf("relay: --cron-key-encryption-key-file: %w", err)
	}
	return s, nil
}

// NewRelayDeliverer returns the deliverer of a chronos relay process's
// dispatchers on engine, for cfg (with its defaults): a fire armed for
// direct delivery goes to its agent, signed under the job's cron key opened
// with sealer (relay/direct), any other to NAS's signed relay route
// (relay.nas_url). maxConns sizes the pool of connections to NAS (0: the
// default). close releases their idle connections.
func NewRelayDeliverer(cfg nas.Config, sealer *cronkey.Sealer, engine relay.Engine, log *slog.Logger, maxConns int) (d relay.Deliverer, close func(), err error) {
	mediated, err := newDeliverer(cfg, log, maxConns)
	if err != nil {
		return nil, nil, err
	}
	dd, caller, err := newDirectDeliverer(cfg, sealer, engine, log)
	if err != nil {
		mediated.Close()
		return nil, nil, err
	}
	return direct.Route(dd, mediated), func() {
		mediated.Close()
		caller.CloseIdle()
	}, nil
}

// newDirectDeliverer builds the deliverer of direct fires: the agent
// client of NAS's settings (callback policy, delivery_timeout), NAS's
// issuer and max_auth_attempts, and rows re-read from engine.
func newDirectDeliverer(cfg nas.Config, sealer *cronkey.Sealer, engine relay.Engine, log *slog.Logger) (*direct.Deliverer, *agentcall.Caller, error) {
	allow, err := agentcall.ParseAllowlist(cfg.CallbackAllowlist)
	if err != nil {
		return nil, nil, fmt.Errorf("relay: callback_allowlist: %w", err)
	}
	caller := agentcall.NewCaller(agentcall.Policy{AllowPrivate: cfg.AllowPrivateCallbacks, Allow: allow}, cfg.DeliveryTimeout)
	d, err := direct.New(direct.Config{
		Sealer: sealer, Issuer: cfg.PublicURL, Caller: caller, MaxAuthAttempts: cfg.Relay.Retry.MaxAuthAttempts,
		Rows: engine, Logger: log,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	return d, caller, nil
}

// serveOps serves srv on ln as a part of g, and shuts it down when g stops.
func serveOps(g *group, ln net.Listener, srv *http.Server) {
	g.goErr(func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("relay: serve: %w", err)
		}
		return context.Canceled
	})
	g.goDone(func() {
		<-g.ctx.Done()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(g.ctx), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	})
}

// opsServer serves health, readiness (the store answers and has not lost its
// data, as NAS's /readyz checks it) and the metrics of a relay process: the
// relay's own (relay/metrics, the names NAS serves) and the Go runtime's.
func opsServer(engine relay.Engine, dispatch *relaymetrics.Dispatch) *http.Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(dispatch, relaymetrics.NewStore(engine),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, contract.HealthResponse{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		resp, status := contract.HealthResponse{Status: "ok", Checks: map[string]string{}}, http.StatusOK
		for name, err := range relay.CheckStore(ctx, engine) {
			if err != nil {
				resp.Status, status = "unavailable", http.StatusServiceUnavailable
				resp.Checks[name] = err.Error()
				continue
			}
			resp.Checks[name] = "ok"
		}
		writeHealth(w, status, resp)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// writeHealth writes a health answer.
func writeHealth(w http.ResponseWriter, status int, resp contract.HealthResponse) {
	w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}
