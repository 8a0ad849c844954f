package localapi

import (
	"context"
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
	access *access
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
	s := &Server{o: o, rt: o.Runtime, log: o.Logger, access: newAccess(o.Token), hosts: newHostNames(o.Hosts), keys: o.Keys}
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
	e.GET("/api/session", s.access.session)
	e.POST("/api/login", s.access.login)
	e.POST("/api/logout", s.access.logout)
	r := e.Group("/api", s.access.readAuth)
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
	m := e.Group("/api", s.access.writeAuth)
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
