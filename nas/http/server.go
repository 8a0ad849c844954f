// Package nashttp is the HTTP adapter of NAS on echo: routes, strict body
// decoding through the contract decoder, the one error handler that maps
// *contract.Error to a status and an OAuth-style body, and listeners with
// timeouts. Echo stays inside this package.
package nashttp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
)

// Options configure a Server.
type Options struct {
	// Split serves the relay route, the operator routes and /metrics only on
	// the internal handler (config relay_listen set). Without it the public
	// handler serves everything.
	Split bool
	// Logger logs internal errors; default slog.Default().
	Logger *slog.Logger
	// JWKSMaxAge is the Cache-Control max-age of the JWKS. Default 5m.
	JWKSMaxAge time.Duration
	// StoreTimeout bounds each call a request makes to the relay store
	// (relay.WithCallTimeout): a store that does not answer by then makes
	// the request fail with 503 store_unavailable and a Retry-After, so an
	// agent hears within about StoreTimeout, never after a hang. Default
	// DefaultStoreTimeout.
	StoreTimeout time.Duration
}

// DefaultStoreTimeout is the default Options.StoreTimeout: long enough for
// any healthy store call (they take milliseconds), short enough that a
// request is answered within 2 seconds when the store does not answer.
const DefaultStoreTimeout = 1500 * time.Millisecond

// storeRetryAfter is the Retry-After of a 503 store_unavailable.
const storeRetryAfter = time.Second

// Server holds NAS's two HTTP handlers: the public (agent-facing) one and the
// internal one (relay route, operator routes, metrics).
type Server struct {
	svc      *nas.Service
	opts     Options
	log      *slog.Logger
	public   *echo.Echo
	internal *echo.Echo
}

// NewServer builds the handlers for svc.
func NewServer(svc *nas.Service, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.JWKSMaxAge <= 0 {
		opts.JWKSMaxAge = 5 * time.Minute
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	s := &Server{svc: svc, opts: opts, log: opts.Logger}
	s.public = s.newEcho()
	s.internal = s.newEcho()
	s.routes()
	return s
}

// Handler returns the public handler: agent API, JWKS and health (and, when
// not split, the relay route, operator routes and metrics).
func (s *Server) Handler() http.Handler { return s.public }

// InternalHandler returns the internal handler (relay route, operator
// routes, metrics, health). Without Split it serves the same as Handler.
func (s *Server) InternalHandler() http.Handler {
	if !s.opts.Split {
		return s.public
	}
	return s.internal
}

// Serve serves the public handler on ln until ctx ends, then shuts down
// gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return serve(ctx, ln, s.Handler(), s.writeTimeout())
}

// ServeInternal serves the internal handler on ln until ctx ends.
func (s *Server) ServeInternal(ctx context.Context, ln net.Listener) error {
	return serve(ctx, ln, s.InternalHandler(), s.writeTimeout())
}

// writeTimeout leaves room for a relay call that waits for the agent.
func (s *Server) writeTimeout() time.Duration {
	return max(30*time.Second, s.svc.Config().DeliveryTimeout+10*time.Second)
}

// NewHTTPServer returns an http.Server for h with every timeout set, so slow
// clients cannot hold connections.
func NewHTTPServer(h http.Handler, writeTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    32 << 10,
	}
}

func serve(ctx context.Context, ln net.Listener, h http.Handler, writeTimeout time.Duration) error {
	srv := NewHTTPServer(h, writeTimeout)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-errc
		return err
	}
}

func (s *Server) newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.observe)
	return e
}

// echoPath turns /a/{b}/c into echo's /a/:b/c.
func echoPath(p string) string {
	p = strings.ReplaceAll(p, "{", ":")
	return strings.ReplaceAll(p, "}", "")
}

// routes registers on NewServer's handlers: health on both, the agent API
// and JWKS on the public one, the relay route, metrics and operator routes
// on the internal one, or on the public one when not split.
func (s *Server) routes() {
	s.healthRoutes(s.public)
	s.agentRoutes(s.public)
	if !s.opts.Split {
		s.internalRoutes(s.public, sameHostOnly)
		return
	}
	s.healthRoutes(s.internal)
	s.internalRoutes(s.internal)
}

func (s *Server) healthRoutes(e *echo.Echo) {
	e.GET(contract.PathHealthz, s.healthz)
	e.GET(contract.PathReadyz, s.readyz)
}

func (s *Server) agentRoutes(e *echo.Echo) {
	(&agentAPI{api: s.svc.AgentAPI()}).routes(e)
	e.GET(contract.PathJWKS, s.jwks)
}

// internalRoutes registers the relay route, metrics and the operator
// routes on e, each behind m.
func (s *Server) internalRoutes(e *echo.Echo, m ...echo.MiddlewareFunc) {
	e.POST(contract.PathRelay, s.relay, m...)
	e.GET(contract.PathMetrics, echo.WrapHandler(promhttp.HandlerFor(s.svc.Metrics().Registry, promhttp.HandlerOpts{})), m...)
	if s.svc.HasOperator() {
		ops := &operatorAPI{ops: s.svc.Operator(), auth: s.svc.OperatorAuth(), heal: s.svc.SelfHeal()}
		ops.routes(e, m...)
		(&dashboard{ops: ops, auth: s.svc.OperatorAuth(), explorer: s.svc.Explorer()}).routes(e, m...)
	}
}

// sameHostOnly guards the relay route, metrics and the operator routes
// when they share the agent-facing listener (no relay_listen): they answer
// only a client on NAS's own host (a loopback peer, or a peer at the
// address the connection arrived on) that is not a proxy passing a request
// on (Forwarded, X-Forwarded-For or X-Real-IP set); any other gets 403.
// Agents reach NAS from elsewhere; what NAS's own dispatchers and its
// operator on the host use is not exposed with it. Set relay_listen to
// serve these routes on an address of their own, to whoever reaches it.
func sameHostOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !fromSameHost(c.Request()) {
			return contract.Errorf(http.StatusForbidden, contract.CodeForbidden,
				"this route answers clients on NAS's own host only; set relay_listen to serve it on an address of its own")
		}
		return next(c)
	}
}

// fromSameHost reports whether r comes straight from NAS's own host.
func fromSameHost(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := peer.Addr().Unmap()
	if ip.IsLoopback() {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	self, err := netip.ParseAddrPort(local.String())
	return err == nil && self.Addr().Unmap() == ip
}

// observe bounds the store calls of the request (Options.StoreTimeout) and
// turns a handler error, or a panic, into its answer here, so the status is
// known for the request counter and every answer has the error body.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		c.SetRequest(r.WithContext(relay.WithCallTimeout(r.Context(), s.opts.StoreTimeout)))
		if err := recoverCall(next, c); err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		s.svc.Metrics().ObserveRequest(route, c.Response().Status)
		return nil
	}
}

// recoverCall runs h, turning a panic into an error (logged and answered as a
// 500 by handleError). http.ErrAbortHandler keeps its meaning.
func recoverCall(h echo.HandlerFunc, c echo.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return h(c)
}
