package contract

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Error codes: the stable machine-readable `error` of every error body. Agents
// read them as plain strings; never rename one.
const (
	CodeInvalidRequest       = "invalid_request"         // 400: the body or query is malformed or a field is invalid
	CodeInvalidJSON          = "invalid_json"            // 400: the body is not JSON
	CodeUnknownField         = "unknown_field"           // 400: a field the endpoint does not know
	CodeDuplicateKey         = "duplicate_key"           // 400: a key given twice (also differing only in case)
	CodeTrailingData         = "trailing_data"           // 400: something after the JSON value
	CodeBodyTooLarge         = "body_too_large"          // 413: the body exceeds the limit
	CodeUnsupportedMediaType = "unsupported_media_type"  // 415: Content-Type is not application/json
	CodeInvalidJobID         = "invalid_job_id"          // 400: job_id does not match ^[A-Za-z0-9._-]{1,128}$
	CodeInvalidFireAt        = "invalid_fire_at"         // 400: fire_at missing or not strict RFC 3339
	CodeInvalidDedupKey      = "invalid_dedup_key"       // 400: dedup_key is not job_id:fire_at
	CodeInvalidCallbackURL   = "invalid_callback_url"    // 400/422: callback URL malformed or not allowed
	CodeInvalidCursor        = "invalid_cursor"          // 400: the list cursor is not one NAS issued to this agent
	CodeFireAtInPast         = "fire_at_in_past"         // 422: fire_at is further in the past than the allowed skew
	CodeFireAtTooFar         = "fire_at_too_far"         // 422: fire_at is beyond the far-future horizon
	CodeQuotaExceeded        = "quota_exceeded"          // 422: the agent's armed-job quota is full
	CodeUnauthenticated      = "unauthenticated"         // 401: missing or malformed credentials
	CodeInvalidToken         = "invalid_token"           // 401: a token that fails verification
	CodeInvalidSignature     = "invalid_signature"       // 401: a relay call with a forged, stale or altered signature
	CodeInvalidClient        = "invalid_client"          // 403: a well-formed token that is not a provisioned agent, or an agent the operator disabled
	CodeForbidden            = "forbidden"               // 403: not allowed
	CodeNotFound             = "not_found"               // 404: no such route or resource
	CodeConflict             = "conflict"                // 409: the resource's state forbids it now (an operator enabling an agent the agents file disables)
	CodeMethodNotAllowed     = "method_not_allowed"      // 405
	CodeRateLimited          = "rate_limited"            // 429: too many calls; see Retry-After
	CodeTooEarly             = "too_early"               // 425: the agent's fire endpoint: the slot is further ahead of its clock than the allowed skew; see Retry-After
	CodeAgentUnavailable     = "agent_unavailable"       // 502/503: the agent could not take the fire now; retry
	CodeUnavailable          = "temporarily_unavailable" // 503: the server cannot serve now; see Retry-After
	CodeStoreUnavailable     = "store_unavailable"       // 503: NAS's store (Redis) did not answer in time; see Retry-After
	CodeServerError          = "server_error"            // 500
)

// Error is the OAuth 2.0 style error body (RFC 6749 §5.2) every endpoint
// answers with, and the error value servers pass around before writing it.
type Error struct {
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`

	// Status is the HTTP status to answer with; not on the wire.
	Status int `json:"-"`
	// RetryAfter, when positive, is sent as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
}

// Error implements error.
func (e *Error) Error() string {
	if e.Description == "" {
		return e.Code
	}
	return e.Code + ": " + e.Description
}

// Errorf returns an *Error with the given status, code and description.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Description: fmt.Sprintf(format, args...)}
}

// BadRequest returns a 400 error with the given code.
func BadRequest(code, format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, code, format, args...)
}

// HTTPStatus returns the status to answer with, defaulting by code.
func (e *Error) HTTPStatus() int {
	if e.Status != 0 {
		return e.Status
	}
	switch e.Code {
	case CodeUnauthenticated, CodeInvalidToken, CodeInvalidSignature:
		return http.StatusUnauthorized
	case CodeInvalidClient, CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case CodeFireAtInPast, CodeFireAtTooFar, CodeQuotaExceeded:
		return http.StatusUnprocessableEntity
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeUnavailable, CodeAgentUnavailable, CodeStoreUnavailable:
		return http.StatusServiceUnavailable
	case CodeServerError:
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}

// RetryAfterHeader returns the Retry-After header value in whole seconds
// (rounded up, at least 1), or "" when no retry delay is set.
func (e *Error) RetryAfterHeader() string {
	if e.RetryAfter <= 0 {
		return ""
	}
	secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
	return strconv.FormatInt(secs, 10)
}
