package apitest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// RoundTripper is an http.RoundTripper that validates every request it sends
// and every response it receives against the OpenAPI description, for tests
// that talk to a real server over a connection. Build one with Transport.
type RoundTripper struct {
	base http.RoundTripper
	c    *checker
}

var _ http.RoundTripper = (*RoundTripper)(nil)

// Transport wraps base (http.DefaultTransport when nil) so that every
// exchange through it is validated; violations fail t with t.Errorf.
func Transport(t testing.TB, base http.RoundTripper, opts ...Option) *RoundTripper {
	t.Helper()
	if base == nil {
		base = http.DefaultTransport
	}
	return &RoundTripper{base: base, c: newChecker(t, opts)}
}

// Client returns an http.Client with a validating Transport and a timeout,
// for calling a test server.
func Client(t testing.TB, opts ...Option) *http.Client {
	t.Helper()
	return &http.Client{Transport: Transport(t, nil, opts...), Timeout: 30 * time.Second}
}

// RoundTrip validates req, sends it with the base transport, and validates
// the response, whose body it reads in full and hands back unread.
func (rt *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req.Body)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	rc := rt.c.checkRequest(req.Context(), req, body)

	out := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, err := rt.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	rb, err := readBody(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("apitest: response to %s %s: %w", req.Method, req.URL.Path, err)
	}
	rt.c.checkResponse(req.Context(), req, rc, response{resp.StatusCode, resp.Header, rb})
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	return resp, nil
}

// Violations returns the request violations recorded for requests marked as
// deliberately invalid, in order.
func (rt *RoundTripper) Violations() []error { return rt.c.violations() }

// Exchanges returns how many responses have been validated so far.
func (rt *RoundTripper) Exchanges() int { return rt.c.count() }
