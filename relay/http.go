package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// maxRelayResponseBytes caps how much of NAS's answer is read.
const maxRelayResponseBytes = 64 << 10

// MaxRetryAfter caps the delay a Retry outcome asks for (a Retry-After), so
// a wild header cannot park a fire until it is too old to retry.
const MaxRetryAfter = time.Hour

// HTTPDelivererConfig configures an HTTPDeliverer.
type HTTPDelivererConfig struct {
	// NASURL is the base URL of the NAS listener that serves the relay
	// route (relay.nas_url); contract.PathRelay is appended. Required.
	NASURL string
	// Keys are the key bytes of the Standard Webhooks secrets (see
	// contract.ParseWebhookSecret). Every call carries one signature per
	// key, so during a rotation NAS accepts the call whichever of the keys it
	// already knows. At least one is required.
	Keys [][]byte
	// Timeout bounds one call, the answer included. Default 40s: longer than
	// NAS's own call to the agent (30s by default), so NAS answers first.
	Timeout time.Duration
	// MaxConns sizes the pool of connections to NAS; set it to the
	// dispatcher's Concurrency. Default 64.
	MaxConns int
	// UnauthorizedDelay is the least delay before retrying a call NAS refused
	// with 401 (the relay secrets disagree: a misconfiguration, logged as an
	// error; the fire is kept). Default 5m.
	UnauthorizedDelay time.Duration
	// Client, when set, makes the calls instead of a client built from the
	// settings above (Timeout still bounds each call).
	Client *http.Client
	// Now is the clock for webhook-timestamp. Default time.Now.
	Now func() time.Time
	// Logger receives the deliverer's logs. Default slog.Default().
	Logger *slog.Logger
}

// HTTPDeliverer delivers fires by POSTing a signed contract.RelayRequest to
// NAS's relay route and mapping NAS's answer to an Outcome:
//
//	200 delivered | dropped | instance_stopped | duplicate  → Done
//	200 rejected                                           → Dead (the reason)
//	200 with anything else                                 → Retry
//	401 (NAS refused the signature)                        → Retry after UnauthorizedDelay, logged as an error
//	408, 425, 429, 5xx, timeouts, network errors            → Retry, honouring Retry-After
//	503 agent_unavailable (the agent is not answering)      → Retry, cold start, agent down (probing)
//	3xx                                                    → Retry (redirects are not followed)
//	other 4xx                                              → Dead
//
// The webhook-id of a call is DeliveryID(lease), unique per lease: NAS
// answers a replayed call "duplicate" without calling the agent again, while
// a retry (a new lease) is a new delivery.
type HTTPDeliverer struct {
	url               string
	keys              [][]byte
	client            *http.Client
	transport         *http.Transport // built here; nil for a given Client
	timeout           time.Duration
	unauthorizedDelay time.Duration
	now               func() time.Time
	log               *slog.Logger
}

var _ Deliverer = (*HTTPDeliverer)(nil)

// NewHTTPDeliverer returns a deliverer to the NAS at cfg.NASURL.
func NewHTTPDeliverer(cfg HTTPDelivererConfig) (*HTTPDeliverer, error) {
	u, err := url.Parse(cfg.NASURL)
	if err != nil {
		return nil, fmt.Errorf("relay: NASURL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("relay: NASURL %q must be an http or https base URL", cfg.NASURL)
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("relay: Keys: at least one relay secret is required")
	}
	for i, k := range cfg.Keys {
		if len(k) == 0 {
			return nil, fmt.Errorf("relay: Keys[%d] is empty", i)
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 40 * time.Second
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 64
	}
	if cfg.UnauthorizedDelay == 0 {
		cfg.UnauthorizedDelay = 5 * time.Minute
	}
	if cfg.Timeout < 0 || cfg.MaxConns < 0 || cfg.UnauthorizedDelay < 0 {
		return nil, errors.New("relay: Timeout, MaxConns and UnauthorizedDelay must not be negative")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &HTTPDeliverer{
		url:               strings.TrimRight(u.String(), "/") + contract.PathRelay,
		keys:              cfg.Keys,
		client:            cfg.Client,
		timeout:           cfg.Timeout,
		unauthorizedDelay: cfg.UnauthorizedDelay,
		now:               cfg.Now,
		log:               cfg.Logger,
	}
	if h.client == nil {
		h.transport = &http.Transport{
			Proxy: nil, // NAS is reached directly, never through an environment proxy
			DialContext: (&net.Dialer{
				Timeout:   5 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			ForceAttemptHTTP2:   true,
			MaxIdleConns:        cfg.MaxConns,
			MaxIdleConnsPerHost: cfg.MaxConns,
			// Below NAS's own idle timeout (60 s): the relay drops an
			// idle connection before NAS does.
			IdleConnTimeout:       45 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: cfg.Timeout,
			ExpectContinueTimeout: time.Second,
		}
		h.client = &http.Client{
			Transport: h.transport,
			Timeout:   cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	return h, nil
}

// DeliveryID is the webhook-id of the relay call for a lease:
// "<schedule_id>.<token>", unique per lease.
func DeliveryID(l Lease) string {
	return l.ScheduleID + "." + strconv.FormatInt(l.Token, 10)
}

// Close releases the idle connections of a client the deliverer built.
func (h *HTTPDeliverer) Close() {
	if h.transport != nil {
		h.transport.CloseIdleConnections()
	}
}

// Deliver implements Deliverer.
func (h *HTTPDeliverer) Deliver(ctx context.Context, l Lease) Outcome {
	body := relayBody(l)
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return Outcome{Kind: Retry, Reason: fmt.Sprintf("relay request: %v", err)}
	}
	req.Header.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	for k, v := range contract.WebhookHeaders(h.keys, DeliveryID(l), h.now(), body) {
		req.Header.Set(k, v)
	}
	// The same delivery id twice is one delivery to NAS: marked idempotent
	// (the empty key is not sent), the request is sent again on a new
	// connection when a kept-alive one turns out closed by NAS as it was
	// reused.
	req.Header["Idempotency-Key"] = nil
	var resp *http.Response
	if h.transport != nil {
		// Our own client follows no redirect and its timeout is ctx's: the
		// transport alone does the same without the client's bookkeeping.
		resp, err = h.transport.RoundTrip(req)
	} else {
		resp, err = h.client.Do(req)
	}
	if err != nil {
		return Outcome{Kind: Retry, Reason: fmt.Sprintf("relay call: %v", err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRelayResponseBytes))
	if err != nil {
		return Outcome{Kind: Retry, Reason: fmt.Sprintf("relay call: reading the answer: %v", err)}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxRelayResponseBytes)) // let the connection be reused
	out := classify(resp.StatusCode, resp.Header.Get(contract.HeaderRetryAfter), data, h.now(), h.unauthorizedDelay)
	if resp.StatusCode == http.StatusUnauthorized {
		h.log.Error("relay: NAS refused the relay signature; check that relay.secrets match",
			"schedule_id", l.ScheduleID, "agent_id", l.AgentID, "job_id", l.JobID, "retry_in", out.RetryAfter.String())
	}
	return out
}

// relayBody is json.Marshal of l's contract.RelayRequest, byte for byte,
// built without reflection.
func relayBody(l Lease) []byte {
	b := make([]byte, 0, 128+len(l.ScheduleID)+len(l.AgentID)+len(l.JobID))
	b = append(b, `{"schedule_id":`...)
	b = contract.AppendJSONString(b, l.ScheduleID)
	b = append(b, `,"agent_id":`...)
	b = contract.AppendJSONString(b, l.AgentID)
	b = append(b, `,"job_id":`...)
	b = contract.AppendJSONString(b, l.JobID)
	b = append(b, `,"fire_at":`...)
	if l.FireAt.IsZero() {
		b = append(b, "null"...)
	} else {
		b = contract.AppendJSONString(b, contract.FormatTime(l.FireAt))
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(l.Attempt), 10)
	return append(b, '}')
}

// classify maps NAS's answer to an Outcome.
func classify(status int, retryAfter string, body []byte, now time.Time, unauthorizedDelay time.Duration) Outcome {
	if status >= 200 && status < 300 {
		var r contract.RelayResponse
		if err := json.Unmarshal(body, &r); err != nil {
			return Outcome{Kind: Retry, Reason: fmt.Sprintf("relay answer %d is not a relay response: %v", status, err)}
		}
		return answerOutcome(r)
	}
	var e contract.Error
	_ = json.Unmarshal(body, &e) // best effort: the code and text only enrich the reason
	e.Status, e.RetryAfter = status, parseRetryAfter(retryAfter, now)
	out := errorOutcome(&e)
	if status == http.StatusUnauthorized {
		out.RetryAfter = max(out.RetryAfter, unauthorizedDelay)
	}
	return out
}

// answerOutcome maps a final answer of NAS's relay route (a 200
// RelayResponse) to an Outcome: delivered, dropped, instance_stopped and
// duplicate are Done, rejected is Dead, anything else a Retry. (NAS's own
// dispatchers map NAS's verdicts alike, without the wire: see
// nas.LocalDeliverer.)
func answerOutcome(r contract.RelayResponse) Outcome {
	switch r.Status {
	case contract.RelayDelivered, contract.RelayDropped, contract.RelayInstanceStopped, contract.RelayDuplicate:
		return Outcome{Kind: Done, Reason: joinReason(r.Status, r.AgentStatus, r.Reason)}
	case contract.RelayRejected:
		return Outcome{Kind: Dead, Reason: joinReason("rejected by the agent", r.AgentStatus, r.Reason)}
	}
	return Outcome{Kind: Retry, Reason: fmt.Sprintf("relay answer has an unknown status %q", r.Status)}
}

// errorOutcome maps an error answer of NAS's relay route (its Status, Code,
// Description and RetryAfter) to an Outcome: 503 agent_unavailable (the
// agent is not answering) is a cold-start retry of an agent that is down, as
// is the 502 an older NAS answered for a refused connection; 408, 425, 429,
// 5xx and 3xx are retries honouring RetryAfter, and so is 401 (the caller
// adds its own floor); any other status is Dead.
func errorOutcome(e *contract.Error) Outcome {
	status := e.Status
	reason := joinReason(fmt.Sprintf("nas answered %d", status), e.Code, e.Description)
	wait := min(max(e.RetryAfter, 0), MaxRetryAfter)
	switch {
	case status == http.StatusUnauthorized:
		return Outcome{Kind: Retry, RetryAfter: wait, Reason: reason}
	case status == http.StatusServiceUnavailable && e.Code == contract.CodeAgentUnavailable:
		return Outcome{Kind: Retry, RetryAfter: wait, Reason: reason, ColdStart: true, AgentDown: true}
	case status == http.StatusBadGateway && e.Code == contract.CodeAgentUnavailable && olderNASRefused(e.Description):
		return Outcome{Kind: Retry, RetryAfter: wait, Reason: reason, ColdStart: true, AgentDown: true}
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests,
		status >= 500, status >= 300 && status < 400:
		return Outcome{Kind: Retry, RetryAfter: wait, Reason: reason}
	}
	return Outcome{Kind: Dead, Reason: reason}
}

// olderNASRefused reports whether the description of a 502
// agent_unavailable is that of a NAS older than its 503 for an agent that is
// not answering, which answered a refused connection 502 with the dial
// error's text. The answer comes from another process over the wire, where
// no typed error survives, so its text is all there is to read; NAS's own
// dispatchers never come here (they map NAS's verdict, which carries
// AgentDown).
func olderNASRefused(description string) bool {
	return strings.Contains(strings.ToLower(description), "connection refused")
}

// joinReason joins the non-empty parts with ": ".
func joinReason(parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ": ")
}

// parseRetryAfter reads a Retry-After header (delay seconds or an HTTP date)
// as a delay from now, capped at MaxRetryAfter; 0 when absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0
		}
		d = time.Duration(min(secs, int64(MaxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), MaxRetryAfter)
}
