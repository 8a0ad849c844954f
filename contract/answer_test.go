package contract_test

import (
	"net/http"
	"testing"

	"github.com/chronoscron/chronos/contract"
)

func TestStatusError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status     int
		wantStatus int
		wantCode   string
		wantDesc   string
	}{
		{http.StatusNotFound, 404, contract.CodeNotFound, "no such route"},
		{http.StatusMethodNotAllowed, 405, contract.CodeMethodNotAllowed, "method not allowed on this route"},
		{http.StatusRequestEntityTooLarge, 413, contract.CodeBodyTooLarge, "body too large"},
		{http.StatusUnsupportedMediaType, 415, contract.CodeUnsupportedMediaType, "Content-Type must be application/json"},
		{http.StatusUnauthorized, 401, contract.CodeUnauthenticated, "unauthenticated"},
		{http.StatusForbidden, 403, contract.CodeForbidden, "forbidden"},
		{http.StatusTooManyRequests, 429, contract.CodeRateLimited, "too many requests"},
		{http.StatusServiceUnavailable, 503, contract.CodeUnavailable, "unavailable"},
		{http.StatusBadGateway, 500, contract.CodeServerError, "internal error"},
		{http.StatusInternalServerError, 500, contract.CodeServerError, "internal error"},
		{http.StatusBadRequest, 400, contract.CodeInvalidRequest, "Bad Request"},
		{http.StatusConflict, 409, contract.CodeInvalidRequest, "Conflict"},
	} {
		e := contract.StatusError(tc.status)
		if e.HTTPStatus() != tc.wantStatus || e.Code != tc.wantCode || e.Description != tc.wantDesc {
			t.Errorf("StatusError(%d) = %d %q %q, want %d %q %q", tc.status, e.HTTPStatus(), e.Code, e.Description, tc.wantStatus, tc.wantCode, tc.wantDesc)
		}
	}
}

func TestSetBearerChallenge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code string
		want string
	}{
		{contract.CodeUnauthenticated, `Bearer realm="chronos"`},
		{contract.CodeInvalidToken, `Bearer realm="chronos", error="invalid_token"`},
		{contract.CodeForbidden, ""},
		{contract.CodeNotFound, ""},
	} {
		h := http.Header{}
		contract.SetBearerChallenge(h, "chronos", tc.code)
		if got := h.Get("WWW-Authenticate"); got != tc.want {
			t.Errorf("%s: WWW-Authenticate %q, want %q", tc.code, got, tc.want)
		}
	}
}
