package nashttp

// Answers: the one error handler that maps errors to statuses and bodies,
// and the JSON writer every handler answers with.

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/echoanswer"
	"github.com/chronoscron/chronos/relay"
)

// handleError is the one place that maps errors to statuses and bodies.
// Internal errors are logged and answered without their text.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	ce, ok := echoanswer.Error(err)
	switch {
	case ok:
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
	// A refused bearer token says which scheme is expected.
	contract.SetBearerChallenge(c.Response().Header(), "chronos", ce.Code)
	contract.WriteError(c.Response(), ce)
}

// writeJSON answers v with status.
func writeJSON(c echo.Context, status int, v any) error {
	contract.WriteJSON(c.Response(), status, v)
	return nil
}
