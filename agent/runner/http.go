package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// HTTPRunner runs http payloads. The deadline comes from the run's context;
// Timeout bounds a request whose job sets none.
type HTTPRunner struct {
	// Timeout applies when the run's context has no deadline (default 30 s).
	Timeout time.Duration
	// Transport overrides the transport (tests); nil uses a private transport
	// with no proxy.
	Transport http.RoundTripper
	// BodyLimit caps how much of the response body is read (default 1 MiB).
	BodyLimit int64
}

var _ Runner = (*HTTPRunner)(nil)

// Validate checks the method, URL, headers and accepted statuses.
func (h *HTTPRunner) Validate(p Payload) error {
	if p.HTTP == nil {
		return errors.New("http: payload has no http fields")
	}
	u, err := url.Parse(p.HTTP.URL)
	if err != nil {
		return fmt.Errorf("http: bad url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("http: url %q must be absolute http or https", p.HTTP.URL)
	}
	if m := p.HTTP.Method; m != "" {
		if strings.ToUpper(m) != m || strings.ContainsAny(m, " \t\r\n") {
			return fmt.Errorf("http: bad method %q", m)
		}
	}
	for k, v := range p.HTTP.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n") || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("http: bad header %q", k)
		}
	}
	for _, c := range p.HTTP.Accept {
		if c < 100 || c > 599 {
			return fmt.Errorf("http: accepted status %d out of range", c)
		}
	}
	return nil
}

// transport returns the transport for one run and a function to call when
// the run is over. A private transport is made per run; its idle
// connections (and their reader goroutines) are closed at the end rather than
// left to the idle timeout.
func (h *HTTPRunner) transport() (http.RoundTripper, func()) {
	if h.Transport != nil {
		return h.Transport, func() {}
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 0,
		MaxIdleConns:          4,
		IdleConnTimeout:       30 * time.Second,
	}
	return tr, tr.CloseIdleConnections
}

// Run sends the request and reads (a capped part of) the answer into the
// output. It succeeds when the status is accepted.
func (h *HTTPRunner) Run(ctx context.Context, req Request) Result {
	if err := h.Validate(req.Payload); err != nil {
		return Result{Err: err}
	}
	p := req.Payload.HTTP
	if _, ok := ctx.Deadline(); !ok {
		t := h.Timeout
		if t <= 0 {
			t = 30 * time.Second
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	method := p.Method
	if method == "" {
		method = http.MethodGet
		if p.Body != "" {
			method = http.MethodPost
		}
	}
	var body io.Reader
	if p.Body != "" {
		body = bytes.NewReader([]byte(p.Body))
	}
	hreq, err := http.NewRequestWithContext(ctx, method, p.URL, body)
	if err != nil {
		return Result{Err: fmt.Errorf("http: request: %w", err)}
	}
	for k, v := range p.Headers {
		hreq.Header.Set(k, v)
	}
	hreq.Header.Set("X-Chronos-Job-Id", req.JobID)
	hreq.Header.Set("X-Chronos-Run-Id", req.RunID)
	hreq.Header.Set("X-Chronos-Fire-At", req.FireAt.UTC().Format(time.RFC3339))
	tr, release := h.transport()
	defer release()
	client := &http.Client{Transport: tr}
	if !p.FollowRedirects {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return Result{Err: fmt.Errorf("http: %w", err)}
	}
	defer resp.Body.Close()
	limit := h.BodyLimit
	if limit <= 0 {
		limit = 1 << 20
	}
	fmt.Fprintf(req.Output, "%s %s -> %s\n", method, p.URL, resp.Status)
	if _, err := io.Copy(req.Output, io.LimitReader(resp.Body, limit)); err != nil {
		return Result{Err: fmt.Errorf("http: read body: %w", err), ExitCode: resp.StatusCode}
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if len(p.Accept) > 0 {
		ok = slices.Contains(p.Accept, resp.StatusCode)
	}
	if !ok {
		return Result{Err: fmt.Errorf("http: status %d not accepted", resp.StatusCode), ExitCode: resp.StatusCode}
	}
	return Result{ExitCode: resp.StatusCode}
}
