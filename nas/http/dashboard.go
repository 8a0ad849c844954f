package nashttp

// The operator dashboard: embedded static assets under /ui/, a login form
// that trades the operator token for a SameSite=Strict, HttpOnly session
// cookie, and the same-origin check of cookie-authenticated POSTs. The page
// reads the operator routes (overview, dead letter, unarmed jobs) with that
// cookie and replays dead letters through the replay route.

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
	// PathDashboard is the dashboard page; "/" redirects to it.
	PathDashboard = "/ui/"
	// PathDashboardLogin takes the login form (field "token").
	PathDashboardLogin = "/ui/login"
	// PathDashboardLogout ends the browser session.
	PathDashboardLogout = "/ui/logout"
	// OperatorCookie is the name of the operator's session cookie.
	OperatorCookie = "chronos_operator"
)

//go:embed ui
var uiFiles embed.FS

// uiAssets is the ui directory, served under /ui/.
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

// dashboardRoutes registers the dashboard on e.
func (s *Server) dashboardRoutes(e *echo.Echo) {
	e.GET("/", func(c echo.Context) error { return c.Redirect(http.StatusSeeOther, PathDashboard) })
	e.GET(PathDashboard, s.dashboardAsset)
	e.GET(PathDashboard+":asset", s.dashboardAsset)
	e.POST(PathDashboardLogin, s.login)
	e.POST(PathDashboardLogout, s.logout)
	e.GET(contract.PathOperatorOverview, s.operator(s.overview))
}

// dashboardAsset serves an embedded file of the dashboard; /ui/ is its
// index.html.
func (s *Server) dashboardAsset(c echo.Context) error {
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

// login checks the form's operator token and sets the session cookie. It
// answers 303 to the page either way (with ?login=failed on a wrong token,
// so the form says so), 403 for a cross-origin post.
func (s *Server) login(c echo.Context) error {
	r := c.Request()
	if !sameOrigin(r) {
		return crossOrigin()
	}
	r.Body = http.MaxBytesReader(c.Response(), r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		return contract.BadRequest(contract.CodeInvalidRequest, "the login form could not be read")
	}
	value, exp, err := s.svc.OperatorLogin(r.PostForm.Get("token"))
	if ce, ok := err.(*contract.Error); ok && ce.Status == http.StatusUnauthorized {
		return c.Redirect(http.StatusSeeOther, PathDashboard+"?login=failed")
	}
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{
		Name: OperatorCookie, Value: value, Path: "/", Expires: exp, MaxAge: int(nas.OperatorSessionTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r),
	})
	return c.Redirect(http.StatusSeeOther, PathDashboard)
}

// logout clears the session cookie (the value itself stays valid until it
// expires: it is never stored server-side).
func (s *Server) logout(c echo.Context) error {
	r := c.Request()
	if !sameOrigin(r) {
		return crossOrigin()
	}
	c.SetCookie(&http.Cookie{
		Name: OperatorCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r),
	})
	return c.Redirect(http.StatusSeeOther, PathDashboard)
}

func (s *Server) overview(c echo.Context) error {
	if len(c.QueryParams()) > 0 {
		return contract.BadRequest(contract.CodeInvalidRequest, "the overview takes no query parameters")
	}
	resp, err := s.svc.Overview(c.Request().Context())
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
