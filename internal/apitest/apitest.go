// Package apitest checks HTTP traffic against Chronos's OpenAPI description
// (openapi.yaml) in tests.
//
// Wrap any handler with New, or any client transport with Transport, and every
// request and response that passes is validated with kin-openapi's
// openapi3filter: the route (path and method) must be documented, the request
// must match its parameters and body schema, and the response status must be
// documented for that operation, with the documented Content-Type, a body that
// matches the schema, and every header the description marks required (such
// as Retry-After on 429 and 503). Each violation fails the test through
// t.Errorf, which is safe from server goroutines.
//
// Authentication is the handler's job, not the description's: security
// requirements are accepted without looking at credentials, so a test that
// sends no token and expects 401 needs nothing special. Tests that send a
// deliberately malformed request (bad JSON, wrong Content-Type, an oversized
// body) mark it with ExpectInvalid or the ExpectInvalidRequests option: the
// request's violations are then recorded instead of failing the test, and the
// response is still validated in full.
//
// The description's servers are ignored: routes match on the path alone, so
// httptest servers on any host and port validate the same way.
//
// In a handler test:
//
//	h := apitest.New(t, srv.Handler())
//	rec := httptest.NewRecorder()
//	h.ServeHTTP(rec, req)                        // fails t if the exchange breaks openapi.yaml
//	h.ServeHTTP(rec, apitest.ExpectInvalid(bad)) // bad input: only the response must conform
//
// Against a real server: client := apitest.Client(t), or
// &http.Client{Transport: apitest.Transport(t, base)}.
package apitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/chronoscron/chronos"
)

// maxBody caps how much of a request or response body is read for
// validation; tests never need more.
const maxBody = 64 << 20

// Option configures a Handler or a Transport.
type Option func(*config)

type config struct {
	specData      []byte
	expectInvalid bool
}

// ExpectInvalidRequests marks every request through the Handler or Transport
// as deliberately invalid: request violations (including an undocumented
// path) are recorded, not failures. Responses are still validated; a response
// to an undocumented route must be an error status with the error body.
func ExpectInvalidRequests() Option {
	return func(c *config) { c.expectInvalid = true }
}

// WithSpec validates against the given OpenAPI document instead of the
// module's openapi.yaml.
func WithSpec(data []byte) Option {
	return func(c *config) { c.specData = data }
}

type invalidKey struct{}

// ExpectInvalid returns r marked as deliberately invalid: its request
// violations are recorded instead of failing the test; its response is still
// validated. The mark travels in r's context, so it works for Handler when
// the test calls ServeHTTP itself and for Transport; for a request that
// crosses a real connection to a wrapped Handler, use ExpectInvalidRequests
// on that Handler.
func ExpectInvalid(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), invalidKey{}, true))
}

func markedInvalid(r *http.Request) bool {
	v, _ := r.Context().Value(invalidKey{}).(bool)
	return v
}

// spec is a loaded description with its router.
type spec struct {
	doc      *openapi3.T
	router   routers.Router
	errorRef *openapi3.SchemaRef // components.schemas.Error, for unrouted answers
}

var (
	defaultOnce sync.Once
	defaultSpec *spec
	defaultErr  error
)

// load parses and validates an OpenAPI document and prepares it for
// routing. Its servers are dropped so that routes match on the path alone.
func load(data []byte) (*spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("apitest: loading the OpenAPI description: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("apitest: the OpenAPI description is invalid: %w", err)
	}
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("apitest: routing the OpenAPI description: %w", err)
	}
	s := &spec{doc: doc, router: router}
	if doc.Components != nil {
		s.errorRef = doc.Components.Schemas["Error"]
	}
	return s, nil
}

func (c *config) load() (*spec, error) {
	if c.specData != nil {
		return load(c.specData)
	}
	defaultOnce.Do(func() { defaultSpec, defaultErr = load(chronos.OpenAPI) })
	return defaultSpec, defaultErr
}

func newChecker(t testing.TB, opts []Option) *checker {
	t.Helper()
	c := &config{}
	for _, o := range opts {
		o(c)
	}
	s, err := c.load()
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	return &checker{t: t, spec: s, expectInvalid: c.expectInvalid}
}

// checker validates exchanges and reports to t.
type checker struct {
	t             testing.TB
	spec          *spec
	expectInvalid bool

	mu        sync.Mutex
	exchanges int
	recorded  []error
}

// requestChecked is the outcome of validating the request of an exchange.
type requestChecked struct {
	input *openapi3filter.RequestValidationInput // nil when no route matched
}

func authenticateAny(context.Context, *openapi3filter.AuthenticationInput) error { return nil }

func options() *openapi3filter.Options {
	return &openapi3filter.Options{
		IncludeResponseStatus:             true,
		RejectWhenRequestBodyNotSpecified: true,
		AuthenticationFunc:                authenticateAny,
	}
}

// expectation says what a request's violations mean.
type expectation int

const (
	// expectValid: a violation fails the test.
	expectValid expectation = iota
	// expectInvalid: the request is deliberately invalid; its violations
	// are recorded, not reported.
	expectInvalid
)

// expectationOf is what c expects of req: invalid when the checker or the
// request is marked so.
func (c *checker) expectationOf(req *http.Request) expectation {
	if c.expectInvalid || markedInvalid(req) {
		return expectInvalid
	}
	return expectValid
}

// checkRequest validates the request and reports a violation unless the
// request is expected invalid, in which case it is recorded.
func (c *checker) checkRequest(ctx context.Context, req *http.Request, body []byte) requestChecked {
	want := c.expectationOf(req)
	// Validate a copy: validation reads (and may replace) the body.
	vr := req.Clone(ctx)
	vr.Body = io.NopCloser(bytes.NewReader(body))
	vr.ContentLength = int64(len(body))
	vr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }

	route, pathParams, err := c.spec.router.FindRoute(vr)
	if err != nil {
		c.requestViolation(req, want, fmt.Errorf("undocumented route: %w", err))
		return requestChecked{}
	}
	input := &openapi3filter.RequestValidationInput{
		Request:    vr,
		PathParams: pathParams,
		Route:      route,
		Options:    options(),
	}
	if err := openapi3filter.ValidateRequest(ctx, input); err != nil {
		c.requestViolation(req, want, err)
	}
	return requestChecked{input: input}
}

func (c *checker) requestViolation(req *http.Request, want expectation, err error) {
	err = fmt.Errorf("request %s %s violates openapi.yaml: %w", req.Method, req.URL.Path, err)
	if want == expectInvalid {
		c.mu.Lock()
		c.recorded = append(c.recorded, err)
		c.mu.Unlock()
		c.t.Logf("apitest: expected invalid %v", err)
		return
	}
	c.t.Errorf("apitest: %v", err)
}

// response is one answer to check.
type response struct {
	status int
	header http.Header
	body   []byte
}

// checkResponse validates the response of a request checked before.
func (c *checker) checkResponse(ctx context.Context, req *http.Request, rc requestChecked, r response) {
	status, header, body := r.status, r.header, r.body
	c.mu.Lock()
	c.exchanges++
	c.mu.Unlock()
	if err := c.responseError(ctx, rc, status, header, body); err != nil {
		c.t.Errorf("apitest: response %d to %s %s violates openapi.yaml: %v\nbody: %s",
			status, req.Method, req.URL.Path, err, truncate(body, 512))
	}
}

func (c *checker) responseError(ctx context.Context, rc requestChecked, status int, header http.Header, body []byte) error {
	if rc.input == nil {
		// No documented route: only an error answer is acceptable, in the
		// shape of every error body.
		if status < 400 {
			return fmt.Errorf("status %d answered on an undocumented route", status)
		}
		return c.checkErrorBody(header, body)
	}
	responses := rc.input.Route.Operation.Responses
	if responses.Status(status) == nil && responses.Default() == nil {
		return fmt.Errorf("status %d is not documented for this operation (documented: %s)",
			status, strings.Join(slices.Sorted(maps.Keys(responses.Map())), ", "))
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: rc.input,
		Status:                 status,
		Header:                 header,
		Options:                options(),
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		return err
	}
	return nil
}

func (c *checker) checkErrorBody(header http.Header, body []byte) error {
	if c.spec.errorRef == nil || c.spec.errorRef.Value == nil {
		return nil
	}
	if ct := header.Get("Content-Type"); openapi3.NewContentWithJSONSchemaRef(c.spec.errorRef).Get(ct) == nil {
		return fmt.Errorf("error response has Content-Type %q, want application/json", ct)
	}
	value, err := openapi3filter.JSONBodyDecoder(bytes.NewReader(body), header, c.spec.errorRef, nil)
	if err != nil {
		return fmt.Errorf("error body is not JSON: %w", err)
	}
	if err := c.spec.errorRef.Value.VisitJSON(value, openapi3.VisitAsResponse()); err != nil {
		return fmt.Errorf("error body does not match the Error schema: %w", err)
	}
	return nil
}

// violations returns the recorded request violations, in order.
func (c *checker) violations() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.recorded...)
}

func (c *checker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exchanges
}

// readBody reads all of r (at most maxBody bytes); a nil r is empty.
func readBody(r io.Reader) ([]byte, error) {
	if r == nil || r == http.NoBody {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return data, fmt.Errorf("apitest: reading body: %w", err)
	}
	if len(data) > maxBody {
		return data, errors.New("apitest: body larger than 64 MiB")
	}
	return data, nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
