package nashttp

// The operator dashboard: embedded static assets under /ui/, the session
// route that trades the operator token for a SameSite=Strict, HttpOnly
// cookie, and the same-origin check of cookie-authenticated POSTs. The page
// reads the operator routes (overview, dead letter, unarmed jobs) with that
// cookie, replays dead letters through the replay route, disables and
// enables agents through the kill switch routes and re-keys them through
// the rekey route.

import (
	"embed"
	"io/fs"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// Routes of the operator dashboard.
const (
	// PathDashboard is the dashboard page; "/" serves it too, and "/ui/"
	// redirects to it (308). Its assets are under "/ui/".
	PathDashboard = "/ui"
	// OperatorCookie is the name of the operator's session cookie.
	OperatorCookie = "chronos_operator"
)

//go:embed ui
var uiFiles embed.FS

// uiAssets is the ui directory, served under /ui/ (its index.html at /ui).
var uiAssets = func() fs.FS {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	return sub
}()

// contentSecurityPolicy allows the page nothing but its own origin: no
// inline script or style, no other host.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// dashboard is the handlers of the operator dashboard: its page, its
// session and what it reads (the overview and the explorer), each read
// behind the operator routes' guard.
type dashboard struct {
	ops      *operatorAPI
	auth     *nas.OperatorAuth
	explorer *nas.Explorer
}

// routes registers the dashboard on e.
func (s *dashboard) routes(e *echo.Echo, m ...echo.MiddlewareFunc) {
	e.GET("/", s.dashboardAsset, m...)
	e.GET(PathDashboard, s.dashboardAsset, m...)
	e.GET(PathDashboard+"/", func(c echo.Context) error {
		return c.Redirect(http.StatusPermanentRedirect, PathDashboard)
	}, m...)
	e.GET(PathDashboard+"/:asset", s.dashboardAsset, m...)
	e.POST(contract.PathOperatorSession, s.login, m...)
	e.DELETE(contract.PathOperatorSession, s.logout, m...)
	e.GET(contract.PathOperatorOverview, s.ops.guard(s.overview), m...)
	s.explorerRoutes(e, m...)
}

// dashboardAsset serves an embedded file of the dashboard; / and /ui are
// its index.html.
func (s *dashboard) dashboardAsset(c echo.Context) error {
	name := c.Param("asset")
	if name == "" {
		name = "index.html"
	}
	data, err := fs.ReadFile(uiAssets, name)
	if err != nil || strings.Contains(name, "/") {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such file")
	}
	h := c.Response().Header()
	setPageHeaders(h)
	ctype := "application/octet-stream"
	switch {
	case strings.HasSuffix(name, ".html"):
		ctype = "text/html; charset=utf-8"
	case strings.HasSuffix(name, ".css"):
		ctype = "text/css; charset=utf-8"
	case strings.HasSuffix(name, ".js"):
		ctype = "text/javascript; charset=utf-8"
	case strings.HasSuffix(name, ".svg"):
		ctype = "image/svg+xml"
	}
	return c.Blob(http.StatusOK, ctype, data)
}

// setPageHeaders sets the security and caching headers of the dashboard's
// answers.
func setPageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
}

// login checks the operator token of the dashboard's login form and sets
// the session cookie: 200 with its expiry, 401 for a wrong token, 403 for a
// post from another origin, 429 with Retry-After while the client address
// (the TCP peer: no forwarded header is trusted) is locked out after too
// many wrong tokens.
func (s *dashboard) login(c echo.Context) error {
	r := c.Request()
	if !sameOrigin(r) {
		return crossOrigin()
	}
	var req contract.OperatorSessionRequest
	if err := decode(c, 8<<10, &req); err != nil {
		return err
	}
	value, exp, err := s.auth.Login(r.RemoteAddr, req.Token)
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{
		Name: OperatorCookie, Value: value, Path: "/", Expires: exp, MaxAge: int(nas.OperatorSessionTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r),
	})
	return writeJSON(c, http.StatusOK, contract.OperatorSessionResponse{ExpiresAt: contract.NewTime(exp.UTC())})
}

// logout ends the session of the request's cookie on the server (every NAS
// process sharing the store then refuses it) and clears the cookie. Without
// a live session it only clears the cookie; when the store cannot record
// the end it fails and leaves the cookie, which still works.
func (s *dashboard) logout(c echo.Context) error {
	r := c.Request()
	if !sameOrigin(r) {
		return crossOrigin()
	}
	if ck, err := r.Cookie(OperatorCookie); err == nil {
		if err := s.auth.Logout(r.Context(), ck.Value); err != nil {
			return err
		}
	}
	c.SetCookie(&http.Cookie{
		Name: OperatorCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r),
	})
	return writeJSON(c, http.StatusOK, contract.OKResponse{OK: true})
}

func (s *dashboard) overview(c echo.Context) error {
	if len(c.QueryParams()) > 0 {
		return contract.BadRequest(contract.CodeInvalidRequest, "the overview takes no query parameters")
	}
	resp, err := s.explorer.Overview(c.Request().Context())
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

// sameOrigin reports whether a browser says r comes from a page of the
// origin it is sent to: its Origin header names r's own host, or, without
// Origin (or with the opaque Origin "null" a browser sends under some
// referrer policies), Sec-Fetch-Site says same-origin. A request with
// neither is refused: every browser this page supports sends one of them on
// a POST.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, r.Host)
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// crossOrigin is the answer to a cookie-authenticated POST from elsewhere.
func crossOrigin() error {
	return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "cross-origin request refused")
}

// isHTTPS reports whether the browser reached NAS over TLS, directly or
// through a proxy that says so: the cookie is then Secure.
func isHTTPS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
