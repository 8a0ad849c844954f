package localapi

import (
	"embed"
	"net/http"
	"path"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
)

// ui holds the dashboard: plain HTML, CSS and JavaScript, no build step and
// nothing fetched from elsewhere.
//
//go:embed ui/index.html ui/app.css ui/app.js
var ui embed.FS

// csp keeps the page to its own scripts, styles and API.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (s *Server) dashboard(c echo.Context) error {
	return serveAsset(c, "index.html")
}

func (s *Server) asset(c echo.Context) error {
	name := c.Param("name")
	if name != "app.css" && name != "app.js" {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such asset")
	}
	return serveAsset(c, name)
}

func serveAsset(c echo.Context, name string) error {
	b, err := ui.ReadFile(path.Join("ui", name))
	if err != nil {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such asset")
	}
	types := map[string]string{".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
	c.Response().Header().Set("Content-Security-Policy", csp)
	return c.Blob(http.StatusOK, types[path.Ext(name)], b)
}
