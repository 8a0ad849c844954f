package relay

import (
	"context"
	"errors"
	"time"
)

// ErrUnavailable: the store did not answer in time or could not be reached
// (a server stopped, restarting or cut off). The call may or may not have
// been applied; a caller that needs the outcome repeats it (every
// transition is safe to repeat) or answers that the store is unavailable.
var ErrUnavailable = errors.New("relay: store unavailable")

// callTimeoutKey is the context key of WithCallTimeout.
type callTimeoutKey struct{}

// WithCallTimeout returns a context under which each engine call is bounded
// by d, its retries of a lost connection included, unless the context ends
// sooner: an engine on a server fails a call that runs longer with
// ErrUnavailable instead of waiting for the server to come back. A request
// that makes several calls (a bulk write) thus fails as soon as one call
// does, however many it makes, which a deadline on the whole request could
// not promise. Engines that never wait (the embedded one) ignore it.
func WithCallTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, callTimeoutKey{}, d)
}

// CallTimeout returns the bound WithCallTimeout put on ctx, if any.
func CallTimeout(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(callTimeoutKey{}).(time.Duration)
	return d, ok && d > 0
}
