package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/internal/backoff"
	"github.com/chronoscron/chronos/relay"
)

// retry calls f until it succeeds, fails with an error that a retry cannot
// fix, ctx ends, or Options.RetryFor has passed; it backs off with jitter
// between tries. A connection error asks a Cluster client to reload its
// slot map, and the same failure repeating is logged once with a count. A relay.WithCallTimeout on ctx bounds the whole. An error
// that says Redis could not be reached or did not answer in time wraps
// relay.ErrUnavailable.
func (e *core) retry(ctx context.Context, f func(context.Context) error) error {
	if d, ok := relay.CallTimeout(ctx); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	start := time.Now()
	for try := 1; ; try++ {
		err := f(ctx)
		if err == nil {
			return nil
		}
		e.reloadMap(err) // a refused connection may be a failed-over master
		if !retryable(err) || ctx.Err() != nil || e.opts.RetryFor < 0 || time.Since(start) > e.opts.RetryFor {
			return unavailable(ctx, err)
		}
		wait := callBackoff.Delay(try)
		e.faults.warn(ctx, e.log, "redis call failed, retrying", err)
		if backoff.Sleep(ctx, wait) != nil {
			return unavailable(ctx, err)
		}
	}
}

// callBackoff spaces the tries of one Redis call: 10 ms doubling to 1 s,
// drawn from the upper half of each step so a crowd of callers spreads out.
var callBackoff = backoff.Policy{Base: 10 * time.Millisecond, Max: time.Second, Jitter: backoff.JitterUpperHalf}

// unavailable marks err, the last error of a call, with
// relay.ErrUnavailable when it says Redis could not be reached or did not
// answer in time (the call's deadline passed). A caller that gave up
// (cancelled) is not told the store is down.
func unavailable(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled) {
		return err
	}
	if retryable(err) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", relay.ErrUnavailable, err)
	}
	return err
}

// retryable reports whether err is a lost or refused connection, a timeout
// or a transient server state (loading, a failover, a busy script), which a
// retry may fix, as opposed to an error a retry would only repeat (a script
// error, a refused login, a bad TLS setup, the caller giving up).
func retryable(err error) bool {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false // the caller's context ended: it no longer waits
	case errors.Is(err, goredis.ErrClosed):
		return false // the engine is closing
	case errors.Is(err, goredis.ErrPoolTimeout), errors.Is(err, goredis.ErrPoolExhausted):
		return true // every connection busy: one frees up soon
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true // the connection dropped or the server is (re)starting
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range transientReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	// Dial failures, DNS failures and read or write timeouts.
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	// The client's own words for a connection it could not get.
	msg := err.Error()
	for _, p := range transientClientErrors {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// transientClientErrors are go-redis's plain errors for a connection it
// could not get for now.
var transientClientErrors = []string{"redis: connection not available", "sentinels specified in configuration are unreachable"}

// transientReplies are the prefixes of server errors that describe a passing
// state: data loading, a replica or a cluster mid-failover, a busy script.
var transientReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY ", "MOVED", "ASK"}
