package apitest

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// Handler wraps an http.Handler and validates every request it serves and
// every response it writes against the OpenAPI description. Build one with
// New; it is safe for concurrent use.
type Handler struct {
	next http.Handler
	c    *checker
}

var _ http.Handler = (*Handler)(nil)

// New wraps h so that every exchange through it is validated; violations
// fail t with t.Errorf. New fails t at once when the description does not
// load.
func New(t testing.TB, h http.Handler, opts ...Option) *Handler {
	t.Helper()
	return &Handler{next: h, c: newChecker(t, opts)}
}

// ServeHTTP validates r, serves it with the wrapped handler (which sees the
// same body, Content-Length and headers), and validates what it wrote. The
// response reaches w unchanged.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r.Body)
	if err != nil {
		h.c.t.Errorf("apitest: %s %s: %v", r.Method, r.URL.Path, err)
	}
	rc := h.c.checkRequest(r.Context(), r, body)

	inner := r.WithContext(r.Context())
	if r.Body != nil {
		inner.Body = io.NopCloser(bytes.NewReader(body))
	}
	rec := &recorder{w: w}
	h.next.ServeHTTP(rec, inner)
	status, header := rec.result()
	h.c.checkResponse(r.Context(), r, rc, response{status, header, rec.body.Bytes()})
}

// Violations returns the request violations recorded for requests marked as
// deliberately invalid, in order.
func (h *Handler) Violations() []error { return h.c.violations() }

// Exchanges returns how many responses have been validated so far.
func (h *Handler) Exchanges() int { return h.c.count() }

// recorder passes a response through to w while keeping a copy of its
// status, headers and body.
type recorder struct {
	w      http.ResponseWriter
	status int
	header http.Header // snapshot taken when the header was written
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(status int) {
	if r.status != 0 {
		r.w.WriteHeader(status) // let net/http report the superfluous call
		return
	}
	if status >= 100 && status < 200 {
		r.w.WriteHeader(status) // informational: the final status follows
		return
	}
	r.status = status
	r.header = r.w.Header().Clone()
	r.w.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.body.Write(p)
	return r.w.Write(p)
}

// Flush implements http.Flusher when the underlying writer does.
func (r *recorder) Flush() {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if f, ok := r.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

func (r *recorder) result() (int, http.Header) {
	if r.status == 0 {
		// The handler wrote nothing: net/http answers 200 with an empty body.
		return http.StatusOK, r.w.Header().Clone()
	}
	return r.status, r.header
}
