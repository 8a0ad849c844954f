package echoanswer_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/echoanswer"
)

func TestError(t *testing.T) {
	t.Parallel()
	own := contract.Errorf(http.StatusConflict, contract.CodeInvalidRequest, "taken")
	for _, tc := range []struct {
		name     string
		err      error
		wantOK   bool
		wantCode string
		wantHTTP int
	}{
		{"contract error", own, true, contract.CodeInvalidRequest, http.StatusConflict},
		{"wrapped contract error", fmt.Errorf("adding: %w", own), true, contract.CodeInvalidRequest, http.StatusConflict},
		{"no such route", echo.ErrNotFound, true, contract.CodeNotFound, http.StatusNotFound},
		{"method not allowed", echo.ErrMethodNotAllowed, true, contract.CodeMethodNotAllowed, http.StatusMethodNotAllowed},
		{"echo server error", echo.NewHTTPError(http.StatusBadGateway), true, contract.CodeServerError, http.StatusInternalServerError},
		{"any other error", errors.New("disk on fire"), false, "", 0},
	} {
		ce, ok := echoanswer.Error(tc.err)
		if ok != tc.wantOK {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.wantOK)
			continue
		}
		if ok && (ce.Code != tc.wantCode || ce.HTTPStatus() != tc.wantHTTP) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, ce.HTTPStatus(), ce.Code, tc.wantHTTP, tc.wantCode)
		}
		if ok && tc.err == own && ce != own {
			t.Errorf("%s: not the error itself", tc.name)
		}
	}
}
