// Package agentcall is the outbound call to agents: the callback address
// policy (which hosts a callback may name and which addresses it may reach),
// an SSRF-safe client that POSTs a fire or a reconcile request, and the one
// reading of what an agent's answer means (ClassifyAnswer). NAS uses it for
// NAS-mediated fires and its reconcile nudges; a dispatcher delivering direct
// fires (in NAS or in a chronos relay process) uses it the same way, so both
// deliveries of a fire end alike.
package agentcall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// FireURL returns the URL a fire is POSTed to: the callback base URL with
// /api/cron/fire appended, unless it already ends with it.
func FireURL(callback string) string {
	base := strings.TrimRight(callback, "/")
	if strings.HasSuffix(base, contract.PathFire) {
		return base
	}
	return base + contract.PathFire
}

// Caller POSTs fires to agents with an SSRF-safe client: no proxy, no
// redirects, a dial timeout and a whole-call timeout, a capped response read,
// and a dialer that refuses addresses the policy does not allow after DNS
// resolution.
type Caller struct {
	client  *http.Client
	timeout time.Duration
}

// maxAgentResponse caps how much of an agent's answer is read.
const maxAgentResponse = 64 << 10

// DefaultTimeout bounds a whole call to an agent when NewCaller is given
// none (NAS's delivery_timeout default).
const DefaultTimeout = 30 * time.Second

// NewCaller returns a caller bound to policy with a whole-call timeout
// (<= 0: DefaultTimeout).
func NewCaller(policy Policy, timeout time.Duration) *Caller {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	control := func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrAddressNotAllowed, address)
		}
		if !policy.AllowedAddr(ap.Addr()) {
			return fmt.Errorf("%w: %s", ErrAddressNotAllowed, ap.Addr())
		}
		return nil
	}
	guarded := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: control}
	open := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy: nil, // a proxy would bypass the dial-time guard
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			if policy.AllowedHost(host) {
				return open.DialContext(ctx, network, addr)
			}
			return guarded.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2: true,
		// An answer is a few dozen bytes of JSON, read at most 64 KiB:
		// asking for gzip would only cost a header map per call.
		DisableCompression: true,
		// Relay dispatchers deliver many fires at once, often to agents
		// behind one host: keep enough idle connections per host that a
		// burst reuses them instead of opening (and TIME_WAITing) new ones.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 64,
		// Below the agent's own idle timeout (60 s), so that NAS drops
		// an idle connection before the agent does.
		IdleConnTimeout:       45 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &Caller{
		timeout: timeout,
		client: &http.Client{
			Transport: transport,
			Timeout:   timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
}

// CloseIdle closes idle connections.
func (c *Caller) CloseIdle() { c.client.CloseIdleConnections() }

// Fire POSTs body to fireURL with the bearer token and maps the answer.
func (c *Caller) Fire(ctx context.Context, fireURL, token string, body []byte) FireResult {
	return c.Post(ctx, fireURL, token, body)
}

// Request header values every call to an agent carries, shared: the
// transport only reads a request's headers.
var (
	jsonContentType = []string{contract.MediaTypeJSON}
	nasUserAgent    = []string{"chronos-nas"}
)

// Post is one guarded call to an agent (a fire or a reconcile request):
// the bearer token, a JSON body, the call's timeout, a capped read of the
// answer, and the answer classified by ClassifyAnswer.
func (c *Caller) Post(ctx context.Context, target, token string, body []byte) FireResult {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return FireResult{Outcome: OutcomeRejected, Reason: "invalid callback URL"}
	}
	// The keys are canonical already: set without Header.Set's
	// canonicalisation and a slice per value.
	req.Header[contract.HeaderContentType] = jsonContentType
	req.Header[contract.HeaderAuthorization] = []string{contract.BearerPrefix + token}
	req.Header["User-Agent"] = nasUserAgent
	// A fire (or a reconcile request) is safe to send twice: the agent
	// claims by slot. Marked idempotent (the empty key is not sent), the
	// request is sent again on a new connection when a kept-alive one turns
	// out closed by the agent as it was reused, instead of failing the
	// delivery: an agent's idle timeout can end a connection at any time.
	req.Header["Idempotency-Key"] = nil
	// The client follows no redirect and ctx carries the whole call's
	// deadline, so its transport alone does what Client.Do would, without
	// the client's per-call timer and bookkeeping (every fire comes here).
	resp, err := c.client.Transport.RoundTrip(req)
	if err != nil {
		return classifyDialError(err)
	}
	defer resp.Body.Close()
	buf := answerBuffers.Get().(*[]byte)
	data := readAnswer(resp.Body, (*buf)[:0])
	res := ClassifyAnswer(resp.StatusCode, resp.Header.Get(contract.HeaderRetryAfter), data)
	if cap(data) <= answerBufferCap {
		*buf = data[:0]
		answerBuffers.Put(buf)
	}
	return res
}

// callContext returns ctx bounded by the call's timeout. A ctx that ends
// no later already bounds the call: it is used as it is, without a timer of
// its own.
func (c *Caller) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= c.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// answerBufferCap is the size of the pooled buffers answers are read into:
// an agent's answer is a few dozen bytes. A buffer that grew past it for a
// large answer is left to the garbage collector.
const answerBufferCap = 512

// answerBuffers pools the buffers agents' answers are read into
// (ClassifyAnswer keeps no reference to them).
var answerBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, answerBufferCap)
	return &b
}}

// readAnswer appends what r yields to b until EOF or an error, at most
// maxAgentResponse bytes in all, as io.ReadAll of an io.LimitReader would.
func readAnswer(r io.Reader, b []byte) []byte {
	for len(b) < maxAgentResponse {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(max(cap(b), answerBufferCap), maxAgentResponse-len(b)))
		}
		n, err := r.Read(b[len(b):min(cap(b), maxAgentResponse)])
		b = b[:len(b)+n]
		if err != nil {
			break
		}
	}
	return b
}

// classifyDialError maps a failed call (no answer from the agent) to a
// FireResult: an address the guard refused is final, anything else retries.
func classifyDialError(err error) FireResult {
	switch {
	case errors.Is(err, ErrAddressNotAllowed):
		return FireResult{Outcome: OutcomeRejected, Reason: "callback address not allowed"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return FireResult{Outcome: OutcomeRetry, ColdStart: true, Reason: "connection refused"}
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return FireResult{Outcome: OutcomeRetry, Reason: "agent timed out"}
	default:
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return FireResult{Outcome: OutcomeRetry, Reason: "callback host does not resolve"}
		}
		return FireResult{Outcome: OutcomeRetry, Reason: "agent unreachable: " + networkError(err)}
	}
}

// networkError is the network error under a failed call, without the URL
// the client wraps it in, cut to 200 bytes: for the reason that is logged.
func networkError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
