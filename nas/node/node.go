// Package node assembles and runs a NAS node from its configuration: the
// relay engine (memory, Redis or PostgreSQL), the signing key ring and its watcher, the
// agent verifier, the NAS service and its HTTP listeners, and the relay
// dispatchers with their deliverer. It also runs the dispatchers-only relay
// process (RunRelay). The chronos binary, the demo and the relay benchmark
// build NAS through it, so the wiring exists once.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/internal/systemd"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
)

// Options configure a Node. Only Config and Logger are required; the other
// fields replace a part the node would otherwise build from Config.
type Options struct {
	// Config is NAS's configuration (defaults are applied).
	Config nas.Config
	// Logger receives the node's logs.
	Logger *slog.Logger
	// Engine, when set, is the relay store instead of the one Config.Store
	// names. The node does not close it.
	Engine relay.Engine
	// Listener, when set, serves the routes of Config.Listen instead of a
	// listener the node opens there. The node closes it.
	Listener net.Listener
	// RelayListener, when set, serves the routes of Config.RelayListen (the
	// relay route, operator routes, metrics) instead of a listener the node
	// opens there. The node closes it.
	RelayListener net.Listener
	// Verifier, when set, authenticates agents instead of the verifier
	// built from agents_file and agent_jwt.
	Verifier nas.AgentVerifier
	// Dispatch tunes the in-process dispatchers.
	Dispatch DispatchOptions
}

// DispatchOptions tune the dispatchers a node runs in process. Zero values
// keep the relay package's defaults.
type DispatchOptions struct {
	// Concurrency is how many deliveries each dispatcher keeps in flight.
	Concurrency int
	// DrainTimeout bounds how long a stopping dispatcher waits for them.
	DrainTimeout time.Duration
	// Logger, when set, receives the dispatchers' logs instead of the
	// node's logger.
	Logger *slog.Logger
	// Wrap, when set, wraps the deliverer (to observe each delivery, for
	// example).
	Wrap func(relay.Deliverer) relay.Deliverer
}

// Node is one NAS process's worth of parts, opened and listening, ready to
// Run. A Node that is not Run must be closed with Close.
type Node struct {
	cfg       nas.Config
	log       *slog.Logger
	engine    relay.Engine
	ownEngine bool
	keys      *nas.KeyRing
	svc       *nas.Service
	srv       *nashttp.Server
	ln        net.Listener
	relayLn   net.Listener
	dispatch  DispatchOptions
	closeOnce sync.Once
}

// New opens every part of a node and binds its listeners; nothing is served
// until Run. An unset signing_alg becomes the algorithm of the keys dir's
// signing key.
func New(ctx context.Context, o Options) (n *Node, err error) {
	n = &Node{cfg: o.Config.WithDefaults(), log: o.Logger, engine: o.Engine, ln: o.Listener, relayLn: o.RelayListener, dispatch: o.Dispatch}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	for _, w := range n.cfg.Warnings() {
		n.log.Warn(w)
	}
	secretfile.Warn(n.log, n.cfg.ExposedSecretFiles()...)
	if n.keys, err = openKeys(&n.cfg, n.log); err != nil {
		return n, err
	}
	verifier := o.Verifier
	if verifier == nil {
		if verifier, err = openVerifier(ctx, n.cfg); err != nil {
			return n, err
		}
	}
	if n.engine == nil {
		if n.engine, err = OpenStore(ctx, n.cfg, n.log); err != nil {
			return n, err
		}
		n.ownEngine = true
	}
	if err := n.listen(); err != nil {
		return n, err
	}
	n.svc, err = nas.New(nas.Options{Config: n.cfg, Engine: n.engine, Verifier: verifier, Keys: n.keys, Logger: n.log})
	if err != nil {
		return n, err
	}
	n.srv = nashttp.NewServer(n.svc, nashttp.Options{Split: n.relayLn != nil, Logger: n.log})
	return n, nil
}

// listen binds listen and relay_listen (unless a listener was given); a
// relay route on an ephemeral port (":0") is found where it really is.
func (n *Node) listen() error {
	var err error
	if n.ln == nil {
		if n.ln, err = net.Listen("tcp", n.cfg.Listen); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	routeLn, routeAddr := n.ln, n.cfg.Listen
	if n.relayLn == nil && n.cfg.RelayListen != "" {
		if n.relayLn, err = net.Listen("tcp", n.cfg.RelayListen); err != nil {
			return fmt.Errorf("relay_listen: %w", err)
		}
	}
	if n.relayLn != nil {
		routeLn, routeAddr = n.relayLn, n.cfg.RelayListen
	}
	if strings.HasSuffix(routeAddr, ":0") || routeAddr == "" {
		n.cfg.Relay.NASURL = "http://" + routeLn.Addr().String()
	}
	return nil
}

// URL is the base URL of the agent API listener.
func (n *Node) URL() string { return "http://" + n.ln.Addr().String() }

// RelayURL is the base URL dispatchers deliver to: the relay route.
func (n *Node) RelayURL() string { return n.cfg.Relay.NASURL }

// Run serves the listeners, runs the dispatchers, the key watcher, the
// unarmed-job watcher and the agents' flow-control watcher (the agents
// file's policies, the disabled agents), and tells the service manager the
// node is ready (with the store check of /readyz keeping its watchdog fed).
// When ctx ends, or one part fails, it stops every part, waits for them and
// closes the node; it returns the first failure.
func (n *Node) Run(ctx context.Context) error {
	defer n.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	internal := "relay_listen"
	if n.relayLn == nil {
		internal = "listen, to this host only"
	}
	n.log.Info("nas started", "listen", n.ln.Addr().String(), "relay_listen", addrOf(n.relayLn), "internal_routes", internal,
		"public_url", n.cfg.PublicURL, "store", StoreKind(n.cfg.Store), "signing_alg", n.cfg.SigningAlg,
		"kid", n.keys.Current().Active.KID, "dispatchers", *n.cfg.Relay.Dispatchers,
		"per_agent_parallelism", *n.cfg.Relay.PerAgent.Parallelism, "per_agent_rate", n.cfg.Relay.Flow().Rate)
	g := newGroup(ctx, cancel, n.log, "nas")
	g.goErr(func() error { return n.srv.Serve(ctx, n.ln) })
	if n.relayLn != nil {
		g.goErr(func() error { return n.srv.ServeInternal(ctx, n.relayLn) })
	}
	g.goDone(func() { watchKeys(ctx, n.keys, n.cfg.KeyCheckInterval, n.log) })
	g.goDone(func() { n.svc.SelfHeal().WatchUnarmed(ctx) })
	g.goDone(func() { n.svc.Flow().WatchAgents(ctx) })
	n.startDispatchers(ctx, g)
	systemd.Ready(ctx, n.log, storeAlive(n.engine))
	return g.wait()
}

// startDispatchers runs relay.dispatchers dispatchers as parts of g. They
// deliver in process (nas.LocalDeliverer): no HTTP hop and no relay
// signature between a dispatcher and its own NAS, the same checks as the
// relay route, which stays for relay processes and external schedulers.
func (n *Node) startDispatchers(ctx context.Context, g *group) {
	var deliverer relay.Deliverer = n.svc.LocalDeliverer()
	if n.dispatch.Wrap != nil {
		deliverer = n.dispatch.Wrap(deliverer)
	}
	log := n.dispatch.Logger
	if log == nil {
		log = n.log
	}
	deliverer = recordHistory(ctx, g, n.engine, deliverer, "nas", *n.cfg.Relay.Dispatchers, log)
	for range *n.cfg.Relay.Dispatchers {
		dc := n.cfg.Relay.Dispatch()
		dc.Logger, dc.Metrics = log, n.svc.Metrics().Relay()
		dc.Concurrency, dc.DrainTimeout = n.dispatch.Concurrency, n.dispatch.DrainTimeout
		d := relay.NewDispatcher(n.engine, deliverer, dc)
		g.goErr(func() error { return d.Run(ctx) })
	}
}

// Close releases what New opened; Run calls it on its way out.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		if n.svc != nil {
			n.svc.Close()
		}
		for _, ln := range []net.Listener{n.ln, n.relayLn} {
			if ln != nil {
				_ = ln.Close()
			}
		}
		if n.ownEngine {
			_ = n.engine.Close()
		}
	})
}

// storeAlive is the store check of /readyz as one error, for the watchdog.
func storeAlive(engine relay.Engine) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var errs []error
		for _, err := range relay.CheckStore(ctx, engine) {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}
