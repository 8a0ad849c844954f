package nashttp

// Answers: the one error handler that maps errors to statuses and bodies,
// and the JSON writer every handler answers with.

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

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

// writeJSON answers v with status.
func writeJSON(c echo.Context, status int, v any) error {
	contract.WriteJSON(c.Response(), status, v)
	return nil
}
