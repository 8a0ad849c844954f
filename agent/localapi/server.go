package localapi

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/echoanswer"
)

// Routes and names of the local API.
const (
	// SessionCookie is the dashboard's session cookie.
	SessionCookie = "chronos_ui_session"
	// HeaderUI is the header the dashboard sends with every change; a
	// change authenticated by the session cookie needs it.
	HeaderUI = "X-Chronos-UI"
	// DefaultOutputCap caps the output GET /api/runs/{id} returns.
	DefaultOutputCap = 256 << 10
	// sessionTTL is how long a dashboard session lives.
	sessionTTL = 12 * time.Hour
	// maxBody bounds request bodies.
	maxBody = 1 << 20
)

// StatusFunc reports the agent's status, as `chronos agent status --json`
// shows it.
type StatusFunc func(ctx context.Context) (any, error)

// Options configure a Server.
type Options struct {
	// Runtime is the agent's runtime (required).
	Runtime *agent.Runtime
	// Token is the admin token every change needs (required).
	Token string
	// OpenReads is kept for older embedders and ignored: every read can
	// carry secrets or run output, so it needs the token or a session.
	//
	// Deprecated: reads always need the admin token or a session.
	OpenReads bool
	// Hosts are the names and addresses a request's Host may carry besides
	// localhost, the loopback addresses and the address the connection
	// arrived on: the listener's configured host and ui_hosts (the names a
	// proxy or the hosts file gives it). A request with any other Host is
	// refused with 421 before it is read, which defeats DNS rebinding.
	// A port in an entry is ignored; a Unix socket connection is not
	// checked.
	Hosts []string
	// Status reports the agent's status for GET /api/status (required).
	Status StatusFunc
	// Logger receives the server's logs (default: discarded).
	Logger *slog.Logger
	// OutputCap caps the run output GET /api/runs/{id} returns (default
	// DefaultOutputCap).
	OutputCap int64
	// Events tunes the event stream.
	Events EventOptions
	// Keys tells each job's delivery mode; default the key store of the
	// runtime's home (read only).
	Keys *cronkeys.Store
}

// Server is the local API and dashboard of one agent.
type Server struct {
	o      Options
	rt     *agent.Runtime
	log    *slog.Logger
	echo   *echo.Echo
	hub    *hub
	stop   context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	sessns map[string]time.Time // session id -> expiry
	hosts  hostNames
	keys   *cronkeys.Store // nil: every job is delivered through NAS
}

// New builds the server and starts following the runtime's ledger and job
// changes for the event stream. Close stops it.
func New(o Options) (*Server, error) {
	switch {
	case o.Runtime == nil:
		return nil, errors.New("localapi: a runtime is required")
	case strings.TrimSpace(o.Token) == "":
		return nil, errors.New("localapi: an admin token is required")
	case o.Status == nil:
		return nil, errors.New("localapi: a status function is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OutputCap <= 0 {
		o.OutputCap = DefaultOutputCap
	}
	s := &Server{o: o, rt: o.Runtime, log: o.Logger, sessns: map[string]time.Time{}, hosts: newHostNames(o.Hosts), keys: o.Keys}
	if s.keys == nil {
		keys, err := cronkeys.Open(o.Runtime.Store().Home(), cronkeys.Options{Logger: o.Logger})
		if err != nil {
			o.Logger.Warn("localapi: cannot read the cron keys; every job is shown delivered through NAS", "error", err)
		}
		s.keys = keys
	}
	s.hub = newHub(o.Events)
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.follow(ctx)
	s.echo = s.routes()
	return s, nil
}

// Close stops the event stream: connected clients are cut off.
func (s *Server) Close() {
	s.stop()
	s.hub.close()
	s.wg.Wait()
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Pre(s.headers, s.checkHost)
	e.GET("/", s.dashboard)
	e.GET("/assets/:name", s.asset)
	e.GET("/api/session", s.session)
	e.POST("/api/login", s.login)
	e.POST("/api/logout", s.logout)
	r := e.Group("/api", s.readAuth)
	r.GET("/jobs", s.listJobs)
	r.GET("/jobs/:id", s.showJob)
	r.GET("/runs", s.listRuns)
	r.GET("/runs/:id", s.showRun)
	r.GET("/runs/:id/children", s.runChildren)
	r.GET("/chains", s.listChains)
	r.GET("/chains/:id", s.showChain)
	r.GET("/chain-breakers", s.listBreakers)
	r.GET("/status", s.status)
	r.GET("/events", s.events)
	m := e.Group("/api", s.writeAuth)
	m.POST("/jobs", s.addJob)
	m.PATCH("/jobs/:id", s.editJob)
	m.DELETE("/jobs/:id", s.removeJob)
	m.POST("/jobs/:id/pause", s.pauseJob)
	m.POST("/jobs/:id/resume", s.resumeJob)
	m.POST("/jobs/:id/run", s.runJob)
	m.POST("/runs/:id/cancel", s.cancelRun)
	m.POST("/chain-breakers/:class/reset", s.resetBreaker)
	return e
}

// headers keeps every answer out of caches and frames.
func (s *Server) headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		return next(c)
	}
}

// how a request is authenticated.
type credential int

const (
	credNone credential = iota
	credBearer
	credCookie
	credBadBearer
)

// credentialOf says how r is authenticated.
func (s *Server) credentialOf(r *http.Request) credential {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := contract.BearerToken(h)
		if ok && s.tokenOK(tok) {
			return credBearer
		}
		return credBadBearer
	}
	if ck, err := r.Cookie(SessionCookie); err == nil && s.sessionOK(ck.Value) {
		return credCookie
	}
	return credNone
}

func (s *Server) tokenOK(tok string) bool {
	return subtle.ConstantTimeCompare([]byte(tok), []byte(strings.TrimSpace(s.o.Token))) == 1
}

func (s *Server) sessionOK(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.sessns[id]
	if ok && time.Now().After(exp) {
		delete(s.sessns, id)
		return false
	}
	return ok
}

func unauthenticated(why string) *contract.Error {
	return contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "%s", why)
}

// readAuth needs the token, or a session of the dashboard used from its
// own origin, for every read: jobs carry their environment, runs their
// output.
func (s *Server) readAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch s.credentialOf(c.Request()) {
		case credBearer:
			return next(c)
		case credCookie:
			if err := sameSiteRead(c.Request()); err != nil {
				return err
			}
			return next(c)
		case credBadBearer:
			return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "the bearer token is not the agent's admin token")
		}
		return unauthenticated("reads need the agent's admin token: Authorization: Bearer <token>, or log in")
	}
}

// sameSiteRead refuses a read made with the session cookie by another
// origin: a foreign Origin, or a Sec-Fetch-Site other than same-origin or
// none (another port of the same host is the same site to the cookie, not
// the same origin).
func sameSiteRead(r *http.Request) *contract.Error {
	if err := sameOriginLogin(r); err != nil {
		return err
	}
	if sf := r.Header.Get("Sec-Fetch-Site"); sf != "" && sf != "same-origin" && sf != "none" {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "cross-site request refused")
	}
	return nil
}

// writeAuth needs the token for every change; a change authenticated by the
// session cookie must come from the dashboard itself.
func (s *Server) writeAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch s.credentialOf(c.Request()) {
		case credBearer:
			return next(c)
		case credCookie:
			if err := sameOrigin(c.Request()); err != nil {
				return err
			}
			return next(c)
		case credBadBearer:
			return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "the bearer token is not the agent's admin token")
		}
		return unauthenticated("changes need the agent's admin token: Authorization: Bearer <token>, or log in")
	}
}

// sameOrigin refuses a request another site made: a foreign Origin, a
// cross-site Sec-Fetch-Site, or no X-Chronos-UI header.
func sameOrigin(r *http.Request) *contract.Error {
	if err := sameSiteRead(r); err != nil {
		return err
	}
	if r.Header.Get(HeaderUI) == "" {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "a change made with the session cookie needs the %s header", HeaderUI)
	}
	return nil
}

// LoginRequest is the body of POST /api/login.
type LoginRequest struct {
	Token string `json:"token"`
}

// SessionInfo answers GET /api/session, POST /api/login and POST
// /api/logout: whether the caller is authenticated. ReadsOpen is always
// false (every read needs the token or a session); it is kept for clients
// that read it.
type SessionInfo struct {
	Authenticated bool `json:"authenticated"`
	ReadsOpen     bool `json:"reads_open"`
}

func (s *Server) session(c echo.Context) error {
	cred := s.credentialOf(c.Request())
	return writeJSON(c, http.StatusOK, SessionInfo{Authenticated: cred == credBearer || cred == credCookie})
}

func (s *Server) login(c echo.Context) error {
	if err := sameOriginLogin(c.Request()); err != nil {
		return err
	}
	var req LoginRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if !s.tokenOK(strings.TrimSpace(req.Token)) {
		return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "that is not the agent's admin token")
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	now := time.Now()
	s.mu.Lock()
	for old, exp := range s.sessns {
		if now.After(exp) {
			delete(s.sessns, old)
		}
	}
	s.sessns[id] = now.Add(sessionTTL)
	s.mu.Unlock()
	http.SetCookie(c.Response(), &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second), Secure: c.Request().TLS != nil})
	return writeJSON(c, http.StatusOK, SessionInfo{Authenticated: true})
}

// sameOriginLogin refuses a login posted from another site.
func sameOriginLogin(r *http.Request) *contract.Error {
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "cross-origin request refused")
	}
	return nil
}

func (s *Server) logout(c echo.Context) error {
	if ck, err := c.Request().Cookie(SessionCookie); err == nil {
		s.mu.Lock()
		delete(s.sessns, ck.Value)
		s.mu.Unlock()
	}
	http.SetCookie(c.Response(), &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	return writeJSON(c, http.StatusOK, SessionInfo{})
}

// handleError answers every error with the documented error body.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	ce, ok := echoanswer.Error(err)
	if !ok {
		s.log.Error("local api request failed", "method", c.Request().Method, "path", c.Path(), "error", err.Error())
		ce = contract.Errorf(http.StatusInternalServerError, contract.CodeServerError, "internal error")
	}
	contract.SetBearerChallenge(c.Response().Header(), "chronos-agent", ce.Code)
	contract.WriteError(c.Response(), ce)
}

func writeJSON(c echo.Context, status int, v any) error {
	contract.WriteJSON(c.Response(), status, v)
	return nil
}

// decode reads the JSON body strictly into v; an empty body leaves v as it
// is.
func decode(c echo.Context, v any) error {
	r := c.Request()
	if r.ContentLength == 0 && r.Header.Get(contract.HeaderContentType) == "" {
		return nil
	}
	if err := contract.DecodeRequest(c.Response(), r, maxBody, v); err != nil {
		return err
	}
	return nil
}
