// Package echoanswer turns the errors of an echo handler into the error
// body they are answered with, for the HTTP layers built on echo (NAS's and
// the agent's local API), so that both answer the same error alike.
package echoanswer

import (
	"errors"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
)

// Error returns the error body err is answered with: a *contract.Error as it
// is, and an error of echo itself (no such route, a method the route does
// not take, ...) as contract.StatusError maps its status. ok is false for
// any other error: the caller decides, most often a logged 500.
func Error(err error) (ce *contract.Error, ok bool) {
	if errors.As(err, &ce) {
		return ce, true
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return contract.StatusError(he.Code), true
	}
	return nil, false
}
