package contract

import "net/http"

// StatusError returns the error body of an answer a server's router gives
// by itself, before any handler ran (no such route, a method the route does
// not take, a body or media type it refuses, ...): the code of the same
// meaning, a 500 server_error for any status of 500 and above, and
// invalid_request with the status text for any other.
func StatusError(status int) *Error {
	switch status {
	case http.StatusNotFound:
		return Errorf(status, CodeNotFound, "no such route")
	case http.StatusMethodNotAllowed:
		return Errorf(status, CodeMethodNotAllowed, "method not allowed on this route")
	case http.StatusRequestEntityTooLarge:
		return Errorf(status, CodeBodyTooLarge, "body too large")
	case http.StatusUnsupportedMediaType:
		return Errorf(status, CodeUnsupportedMediaType, "Content-Type must be application/json")
	case http.StatusUnauthorized:
		return Errorf(status, CodeUnauthenticated, "unauthenticated")
	case http.StatusForbidden:
		return Errorf(status, CodeForbidden, "forbidden")
	case http.StatusTooManyRequests:
		return Errorf(status, CodeRateLimited, "too many requests")
	case http.StatusServiceUnavailable:
		return Errorf(status, CodeUnavailable, "unavailable")
	}
	if status >= 500 {
		return Errorf(http.StatusInternalServerError, CodeServerError, "internal error")
	}
	return Errorf(status, CodeInvalidRequest, "%s", http.StatusText(status))
}

// SetBearerChallenge sets the WWW-Authenticate header that tells the client
// of a refused bearer token which scheme is expected (RFC 6750 §3): for an
// unauthenticated answer the realm, for an invalid_token one the realm and
// the error. Answers with any other code are left as they are.
func SetBearerChallenge(h http.Header, realm, code string) {
	switch code {
	case CodeUnauthenticated:
		h.Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	case CodeInvalidToken:
		h.Set("WWW-Authenticate", `Bearer realm="`+realm+`", error="invalid_token"`)
	}
}
