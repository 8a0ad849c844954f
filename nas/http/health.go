package nashttp

// Keys and health: the JWKS agents verify fire tokens with, liveness and
// readiness.

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
)

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
