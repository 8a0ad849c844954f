// Package nashttp is the HTTP adapter of NAS on echo: routes, strict body
// decoding through the contract decoder, the one error handler that maps
// *contract.Error to a status and an OAuth-style body, and listeners with
// timeouts. Echo stays inside this package.
package nashttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
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
	s.routes(s.public, true, !opts.Split)
	if opts.Split {
		s.routes(s.internal, false, true)
	}
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

func (s *Server) routes(e *echo.Echo, agentAPI, internal bool) {
	e.GET(contract.PathHealthz, s.healthz)
	e.GET(contract.PathReadyz, s.readyz)
	if agentAPI {
		e.POST(contract.PathProvision, s.agent(s.provision))
		e.POST(contract.PathCancel, s.agent(s.cancel))
		e.GET(contract.PathList, s.agent(s.list))
		e.PUT(contract.PathArmed, s.agent(s.putArmed))
		e.POST(contract.PathFailedFiresAck, s.agent(s.ackFailedFires))
		e.GET(contract.PathJWKS, s.jwks)
	}
	if internal {
		e.POST(contract.PathRelay, s.relay)
		e.GET(contract.PathMetrics, echo.WrapHandler(promhttp.HandlerFor(s.svc.Metrics().Registry, promhttp.HandlerOpts{})))
		if s.svc.HasOperator() {
			e.POST(echoPath(contract.PathOperatorInstanceStop), s.operator(s.stopInstance))
			e.POST(echoPath(contract.PathOperatorInstanceStart), s.operator(s.startInstance))
			e.POST(echoPath(contract.PathOperatorAgentCancel), s.operator(s.cancelAll))
			e.GET(contract.PathOperatorDLQ, s.operator(s.listDead))
			e.POST(contract.PathOperatorDLQReplay, s.operator(s.replay))
			e.GET(contract.PathOperatorUnarmed, s.operator(s.unarmed))
		}
	}
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

// handleError is the one place that maps errors to statuses and bodies.
// Internal errors are logged and answered without their text.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ce *contract.Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ce):
	case errors.As(err, &he):
		ce = fromEcho(he)
	case errors.Is(err, relay.ErrUnavailable):
		// The store did not answer in time. A write may still be applied
		// when it resumes; every write here is safe to repeat.
		s.log.WarnContext(c.Request().Context(), "store unavailable", "method", c.Request().Method, "path", c.Path(), "error", err.Error())
		ce = contract.Errorf(http.StatusServiceUnavailable, contract.CodeStoreUnavailable, "the store did not answer in time; retry later")
		ce.RetryAfter = storeRetryAfter
	default:
		s.log.ErrorContext(c.Request().Context(), "request failed", "method", c.Request().Method, "path", c.Path(), "error", err.Error())
		ce = contract.Errorf(http.StatusInternalServerError, contract.CodeServerError, "internal error")
	}
	// A 503, and a 502 for an agent that failed, always say when to come
	// back. An agent that gave no delay is "0": the relay then retries on its
	// own ladder (the fast cold-start one for a waking agent).
	status := ce.HTTPStatus()
	agentDown := ce.Code == contract.CodeAgentUnavailable
	if (status == http.StatusServiceUnavailable || (status == http.StatusBadGateway && agentDown)) && ce.RetryAfter <= 0 {
		if !agentDown {
			ce.RetryAfter = time.Second
		} else {
			c.Response().Header().Set(contract.HeaderRetryAfter, "0")
		}
	}
	// A refused bearer token says which scheme is expected (RFC 6750 §3).
	switch ce.Code {
	case contract.CodeUnauthenticated:
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="chronos"`)
	case contract.CodeInvalidToken:
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="chronos", error="invalid_token"`)
	}
	contract.WriteError(c.Response(), ce)
}

func fromEcho(he *echo.HTTPError) *contract.Error {
	switch he.Code {
	case http.StatusNotFound:
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	case http.StatusMethodNotAllowed:
		return contract.Errorf(http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed, "method not allowed on this route")
	case http.StatusRequestEntityTooLarge:
		return contract.Errorf(he.Code, contract.CodeBodyTooLarge, "body too large")
	case http.StatusUnsupportedMediaType:
		return contract.Errorf(he.Code, contract.CodeUnsupportedMediaType, "Content-Type must be application/json")
	case http.StatusUnauthorized:
		return contract.Errorf(he.Code, contract.CodeUnauthenticated, "unauthenticated")
	case http.StatusForbidden:
		return contract.Errorf(he.Code, contract.CodeForbidden, "forbidden")
	case http.StatusTooManyRequests:
		return contract.Errorf(he.Code, contract.CodeRateLimited, "too many requests")
	case http.StatusServiceUnavailable:
		return contract.Errorf(he.Code, contract.CodeUnavailable, "unavailable")
	}
	if he.Code >= 500 {
		return contract.Errorf(http.StatusInternalServerError, contract.CodeServerError, "internal error")
	}
	return contract.Errorf(he.Code, contract.CodeInvalidRequest, "%s", http.StatusText(he.Code))
}

func writeJSON(c echo.Context, status int, v any) error {
	contract.WriteJSON(c.Response(), status, v)
	return nil
}

// ---- agent API ----

type agentHandler func(c echo.Context, id nas.Identity) error

// agent authenticates the caller from its token alone (and takes one token
// of its rate limit) before the handler reads anything else.
func (s *Server) agent(h agentHandler) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := s.svc.Authorize(c.Request().Context(), c.Request().Header.Get(contract.HeaderAuthorization))
		if err != nil {
			return err
		}
		return h(c, id)
	}
}

func decode(c echo.Context, limit int64, v any) error {
	if e := contract.DecodeRequest(c.Response(), c.Request(), limit, v); e != nil {
		return e
	}
	return nil
}

func (s *Server) provision(c echo.Context, id nas.Identity) error {
	var req contract.ProvisionRequest
	if err := decode(c, contract.DefaultMaxBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.svc.Provision(c.Request().Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) cancel(c echo.Context, id nas.Identity) error {
	var req contract.CancelRequest
	if err := decode(c, contract.DefaultMaxBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.svc.Cancel(c.Request().Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

// pageParams reads limit and cursor; an absent limit is 0 (list: every
// armed job; the dead letter: the largest page). A limit too large for an
// int is clamped like any large one.
func pageParams(c echo.Context) (int, string, error) {
	q := c.Request().URL.Query()
	for k := range q {
		if k != "limit" && k != "cursor" && k != "agent_id" {
			return 0, "", contract.BadRequest(contract.CodeInvalidRequest, "unknown query parameter %q", k)
		}
		if len(q[k]) > 1 {
			return 0, "", contract.BadRequest(contract.CodeInvalidRequest, "query parameter %q given more than once", k)
		}
	}
	limit := 0
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v[0], "-") {
			// A limit too large for an int is clamped like any large one.
			n, err = contract.MaxListLimit, nil
		}
		if err != nil || n < 1 {
			return 0, "", contract.BadRequest(contract.CodeInvalidRequest, "limit must be a positive integer")
		}
		limit = n
	}
	cursor := q.Get("cursor")
	if _, ok := q["cursor"]; ok && cursor == "" {
		return 0, "", contract.BadRequest(contract.CodeInvalidCursor, "cursor must not be empty")
	}
	return limit, cursor, nil
}

func (s *Server) list(c echo.Context, id nas.Identity) error {
	if _, ok := c.Request().URL.Query()["agent_id"]; ok {
		return contract.BadRequest(contract.CodeInvalidRequest, "unknown query parameter \"agent_id\"")
	}
	limit, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	resp, err := s.svc.List(c.Request().Context(), id, limit, cursor)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) ackFailedFires(c echo.Context, id nas.Identity) error {
	var req contract.FailedFiresAckRequest
	// Up to 1000 ids of up to 256 bytes: more than the small-body limit.
	if err := decode(c, contract.DefaultMaxBulkBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.svc.AckFailedFires(c.Request().Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) putArmed(c echo.Context, id nas.Identity) error {
	var req contract.PutArmedRequest
	if err := decode(c, contract.DefaultMaxBulkBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.svc.PutArmed(c.Request().Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

// ---- relay route ----

func (s *Server) relay(c echo.Context) error {
	r := c.Request()
	if e := contract.CheckJSONContentType(r.Header.Get(contract.HeaderContentType)); e != nil {
		return e
	}
	limit := int64(contract.DefaultMaxBodyBytes)
	if r.ContentLength > limit {
		return contract.Errorf(http.StatusRequestEntityTooLarge, contract.CodeBodyTooLarge, "body exceeds %d bytes", limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return contract.Errorf(http.StatusRequestEntityTooLarge, contract.CodeBodyTooLarge, "body exceeds %d bytes", limit)
		}
		return contract.BadRequest(contract.CodeInvalidRequest, "reading body failed")
	}
	resp, err := s.svc.Relay(r.Context(), nas.RelayHeaders{
		ID:        r.Header.Get(contract.HeaderWebhookID),
		Timestamp: r.Header.Get(contract.HeaderWebhookTimestamp),
		Signature: r.Header.Get(contract.HeaderWebhookSignature),
	}, body)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

// ---- keys and health ----

func (s *Server) jwks(c echo.Context) error {
	h := c.Response().Header()
	h.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(int(s.opts.JWKSMaxAge/time.Second)))
	c.Response().WriteHeader(http.StatusOK)
	_, err := c.Response().Write(s.svc.JWKS())
	return err
}

func (s *Server) healthz(c echo.Context) error {
	return writeJSON(c, http.StatusOK, contract.HealthResponse{Status: "ok"})
}

func (s *Server) readyz(c echo.Context) error {
	checks := s.svc.Ready(c.Request().Context())
	resp := contract.HealthResponse{Status: "ok", Checks: map[string]string{}}
	status := http.StatusOK
	for name, err := range checks {
		if err != nil {
			resp.Status, status = "unavailable", http.StatusServiceUnavailable
			resp.Checks[name] = err.Error()
			continue
		}
		resp.Checks[name] = "ok"
	}
	return writeJSON(c, status, resp)
}

// ---- operator ----

func (s *Server) operator(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.svc.AuthorizeOperator(c.Request().Header.Get(contract.HeaderAuthorization)); err != nil {
			return err
		}
		return h(c)
	}
}

func (s *Server) stopInstance(c echo.Context) error  { return s.setInstance(c, true) }
func (s *Server) startInstance(c echo.Context) error { return s.setInstance(c, false) }

func (s *Server) setInstance(c echo.Context, stopped bool) error {
	resp, err := s.svc.SetInstanceStopped(c.Request().Context(), c.Param("instance_id"), stopped)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) cancelAll(c echo.Context) error {
	resp, err := s.svc.CancelAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) listDead(c echo.Context) error {
	limit, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	q := c.Request().URL.Query()
	agentID := q.Get("agent_id")
	if _, ok := q["agent_id"]; ok && (agentID == "" || len(agentID) > 256) {
		return contract.BadRequest(contract.CodeInvalidRequest, "agent_id must be 1 to 256 characters")
	}
	resp, err := s.svc.ListDead(c.Request().Context(), agentID, cursor, limit)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) replay(c echo.Context) error {
	var req contract.DLQReplayRequest
	if err := decode(c, contract.DefaultMaxBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.svc.Replay(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) unarmed(c echo.Context) error {
	q := c.Request().URL.Query()
	for k, v := range q {
		if k != "agent" {
			return contract.BadRequest(contract.CodeInvalidRequest, "unknown query parameter %q", k)
		}
		if len(v) > 1 {
			return contract.BadRequest(contract.CodeInvalidRequest, "query parameter %q given more than once", k)
		}
	}
	agentID := q.Get("agent")
	if _, ok := q["agent"]; ok && (agentID == "" || len(agentID) > 256) {
		return contract.BadRequest(contract.CodeInvalidRequest, "agent must be 1 to 256 characters")
	}
	resp, err := s.svc.Unarmed(c.Request().Context(), agentID)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}
