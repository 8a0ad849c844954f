// Package nasclient is the agent's client for NAS's agent-cron endpoints
// (hop 1 of the contract): provision, cancel, list, the bulk armed set and
// the acknowledgement of failed fires.
//
// Every call has a deadline. Transient failures (network errors, 5xx, 429)
// are retried with exponential backoff and jitter, honouring Retry-After; all
// five endpoints are idempotent, so a retry after a lost answer is safe.
// Refusals come back as typed errors: *UnauthorizedError (401),
// *ForbiddenError (403), *UnprocessableError (422), *RateLimitedError (429),
// each unwrapping to an *APIError that carries the `error` code and
// description; other statuses are an *APIError.
package nasclient

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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/backoff"
)

// Defaults of Config.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMaxAttempts      = 4
	DefaultBaseBackoff      = 200 * time.Millisecond
	DefaultMaxBackoff       = 5 * time.Second
	DefaultMaxRetryAfter    = 30 * time.Second
	DefaultMaxResponseBytes = 8 << 20
	// MaxPages bounds List: a cursor chain longer than this is an error.
	MaxPages = 10000
)

// Config configures a Client. Zero fields take the defaults in their comments.
type Config struct {
	// PortalURL is NAS's base URL (cron.chronos.portal_url). Required.
	PortalURL string
	// AccessToken is the agent's bearer token for NAS. Required.
	AccessToken string
	// HTTPClient makes the calls; default a client with no redirects whose
	// transport times out connects and headers at Timeout.
	HTTPClient *http.Client
	// Timeout bounds each attempt; default 10 s.
	Timeout time.Duration
	// MaxAttempts is how many times a call is tried; default 4.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the delay between attempts (full
	// exponential backoff with jitter); defaults 200 ms and 5 s.
	BaseBackoff, MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits out; a longer
	// one ends the call with a *RateLimitedError; default 30 s.
	MaxRetryAfter time.Duration
	// MaxResponseBytes caps a response body; default 8 MiB.
	MaxResponseBytes int64
	// UserAgent is sent with every call; default "chronos-agent".
	UserAgent string
	// Logger receives retries; default slog.Default().
	Logger *slog.Logger
	// Clock, when set, is told the Date header of every NAS answer, with
	// the host's times its request was sent and its answer received, so the
	// skew between the two clocks can be estimated (*clockskew.Estimator).
	Clock DateObserver
	// Now is the host's clock those times are read from; default time.Now.
	Now func() time.Time
	// Delivery is the delivery mode provisions ask for when theirs names
	// none (cron.chronos.delivery): contract.DeliveryDirect sends
	// "delivery": "direct"; anything else sends no delivery key, so the
	// body is exactly what an agent that knows no modes sends.
	Delivery string
}

// DateObserver takes the Date header of a NAS answer to a request sent at
// local time sent and answered at local time received.
type DateObserver interface {
	ObserveDate(sent, received, date time.Time)
}

// Client calls NAS. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	cfg   Config
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.PortalURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("nasclient: portal URL %q must be an absolute http(s) URL", cfg.PortalURL)
	}
	if strings.TrimSpace(cfg.AccessToken) == "" {
		return nil, errors.New("nasclient: an access token is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.BaseBackoff <= 0 {
		cfg.BaseBackoff = DefaultBaseBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "chronos-agent"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{
			Transport: &http.Transport{
				Proxy:                 http.ProxyFromEnvironment,
				DialContext:           (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
				TLSHandshakeTimeout:   cfg.Timeout,
				ResponseHeaderTimeout: cfg.Timeout,
				MaxIdleConnsPerHost:   4,
				IdleConnTimeout:       90 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Client{base: u, token: strings.TrimSpace(cfg.AccessToken), hc: hc, cfg: cfg}, nil
}

// ErrUnsupported is returned (wrapped, beside the *APIError) by a call NAS
// does not offer: it answered 404 or 405 for the route. A NAS that predates
// the failed-fire acknowledgement reports each failed fire only once anyway.
var ErrUnsupported = errors.New("nasclient: NAS does not offer this call")

// ErrResponseTooLarge is returned (wrapped) when an answer exceeds
// Config.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("answer exceeds the response size limit")

// APIError is an error answer from NAS.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the body's `error`, e.g. "invalid_client"; empty when the body
	// was not an error body.
	Code string
	// Description is the body's `error_description`.
	Description string
	// RetryAfter is the Retry-After NAS sent, if any.
	RetryAfter time.Duration
	// Op names the call, e.g. "provision".
	Op string
}

// Error implements error.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("nasclient: %s: NAS answered %d", e.Op, e.StatusCode)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Description != "" {
		msg += ": " + e.Description
	}
	return msg
}

// UnauthorizedError is a 401: the access token is missing or malformed.
type UnauthorizedError struct{ APIError }

// ForbiddenError is a 403: the token is not a provisioned agent
// (invalid_client) or the call is not allowed.
type ForbiddenError struct{ APIError }

// UnprocessableError is a 422: a well-formed request NAS refuses
// (fire_at_in_past, fire_at_too_far, quota_exceeded, invalid_callback_url).
type UnprocessableError struct{ APIError }

// RateLimitedError is a 429 that outlasted the retries or asked to wait
// longer than the client will.
type RateLimitedError struct{ APIError }

// Unwrap returns the underlying *APIError.
func (e *UnauthorizedError) Unwrap() error { return &e.APIError }

// Unwrap returns the underlying *APIError.
func (e *ForbiddenError) Unwrap() error { return &e.APIError }

// Unwrap returns the underlying *APIError.
func (e *UnprocessableError) Unwrap() error { return &e.APIError }

// Unwrap returns the underlying *APIError.
func (e *RateLimitedError) Unwrap() error { return &e.APIError }

// typed wraps e in its status's type.
func typed(e *APIError) error {
	switch e.StatusCode {
	case http.StatusUnauthorized:
		return &UnauthorizedError{*e}
	case http.StatusForbidden:
		return &ForbiddenError{*e}
	case http.StatusUnprocessableEntity:
		return &UnprocessableError{*e}
	case http.StatusTooManyRequests:
		return &RateLimitedError{*e}
	default:
		return e
	}
}

// Provision arms (or re-arms) the one one-shot of req.JobID at req.FireAt.
// An empty DedupKey is filled in as job_id:fire_at. A FlexSeconds (the
// fire's flexible window, 0 to contract.MaxFlexSeconds) is sent as
// flex_seconds; 0 sends no such key, so a fire without a window is asked
// for exactly as by a client that knows none. A Delivery is sent as
// delivery; an empty one takes Config.Delivery, and NAS-mediated delivery
// (the default) sends no such key. The answer of a direct provision
// carries the job's cron key: the caller keeps it and never logs it.
func (c *Client) Provision(ctx context.Context, req contract.ProvisionRequest) (contract.ProvisionResponse, error) {
	if err := checkFlex(req.JobID, req.FlexSeconds); err != nil {
		return contract.ProvisionResponse{}, fmt.Errorf("nasclient: provision: %w", err)
	}
	if req.Delivery == "" && c.cfg.Delivery == contract.DeliveryDirect {
		req.Delivery = contract.DeliveryDirect
	}
	if req.Delivery == contract.DeliveryNAS {
		req.Delivery = ""
	}
	if req.DedupKey == "" {
		req.DedupKey = DedupKey(req.JobID, req.FireAt.Time)
	}
	var out contract.ProvisionResponse
	err := c.call(ctx, request{op: "provision", method: http.MethodPost, path: contract.PathProvision, in: req, out: &out})
	return out, err
}

// checkFlex refuses a flexible window NAS would refuse: outside 0 to
// contract.MaxFlexSeconds.
func checkFlex(jobID string, flex int64) error {
	if flex < 0 || flex > contract.MaxFlexSeconds {
		return fmt.Errorf("job %s: flex_seconds %d must be 0 to %d", jobID, flex, contract.MaxFlexSeconds)
	}
	return nil
}

// DedupKey returns the dedup_key NAS expects for a provision: job_id:fire_at,
// fire_at written as it is in the body.
func DedupKey(jobID string, fireAt time.Time) string {
	return jobID + ":" + contract.FormatTime(fireAt)
}

// Cancel disarms jobID; cancelling an unknown job is not an error.
func (c *Client) Cancel(ctx context.Context, jobID string) error {
	var out contract.OKResponse
	return c.call(ctx, request{op: "cancel", method: http.MethodPost, path: contract.PathCancel, in: contract.CancelRequest{JobID: jobID}, out: &out})
}

// ListPage fetches one page of the caller's armed one-shots. An empty cursor
// asks for the first page; limit 0 sends no limit, and NAS answers every
// armed job (after the cursor) at once.
func (c *Client) ListPage(ctx context.Context, limit int, cursor string) (contract.ListResponse, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out contract.ListResponse
	err := c.call(ctx, request{op: "list", method: http.MethodGet, path: contract.PathList, query: q, out: &out})
	return out, err
}

// Listing is everything NAS lists for the agent.
type Listing struct {
	Armed []contract.ArmedJob
	// FailedFires are the fires NAS gave up on that the agent has not
	// acknowledged (AckFailedFires), oldest first.
	FailedFires []contract.FailedFire
	// Unarmed and Instance are what the first page says of the jobs whose
	// last fire has a final outcome and of the agent's instance.
	Unarmed  []contract.UnarmedJob
	Instance *contract.InstanceStatus
}

// List fetches the whole armed set and the failed fires NAS reports, in one
// call without a limit: NAS answers every armed job at once. A NAS that pages
// anyway (it sends a next_cursor) is followed to its last page, and an armed
// set too large for one answer (MaxResponseBytes) is read in pages instead.
func (c *Client) List(ctx context.Context) (Listing, error) {
	all, err := c.list(ctx, 0)
	if errors.Is(err, ErrResponseTooLarge) {
		c.cfg.Logger.Warn("nasclient: the armed set does not fit one answer; listing in pages", "max_response_bytes", c.cfg.MaxResponseBytes)
		all, err = c.list(ctx, contract.MaxListLimit)
	}
	return all, err
}

// list reads every page of the armed set with limit (0: none).
func (c *Client) list(ctx context.Context, limit int) (Listing, error) {
	var all Listing
	seen := map[string]bool{}
	cursor := ""
	for range MaxPages {
		page, err := c.ListPage(ctx, limit, cursor)
		if err != nil {
			return Listing{}, err
		}
		all.Armed = append(all.Armed, page.Armed...)
		all.FailedFires = append(all.FailedFires, page.FailedFires...)
		if cursor == "" {
			all.Unarmed, all.Instance = page.Unarmed, page.Instance
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return all, nil
		}
		cursor = *page.NextCursor
		if seen[cursor] {
			return Listing{}, fmt.Errorf("nasclient: list: NAS repeated cursor %q", cursor)
		}
		seen[cursor] = true
	}
	return Listing{}, fmt.Errorf("nasclient: list: more than %d pages", MaxPages)
}

// AckFailedFires tells NAS that the failed fires with these schedule ids are
// recorded, so it stops listing them; call it only once they are durably
// written. It sends at most contract.MaxFailedFires ids per call and returns
// how many NAS acknowledged (ids it no longer lists are not counted). A NAS
// without the route answers an error wrapping ErrUnsupported.
func (c *Client) AckFailedFires(ctx context.Context, scheduleIDs []string) (int, error) {
	total := 0
	for chunk := range slices.Chunk(scheduleIDs, contract.MaxFailedFires) {
		var out contract.FailedFiresAckResponse
		err := c.call(ctx, request{op: "ack failed fires", method: http.MethodPost, path: contract.PathFailedFiresAck,
			in: contract.FailedFiresAckRequest{ScheduleIDs: chunk}, out: &out})
		var apiErr *APIError
		if errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusNotFound || apiErr.StatusCode == http.StatusMethodNotAllowed) {
			return total, fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		if err != nil {
			return total, err
		}
		total += out.Acknowledged
	}
	return total, nil
}

// PutArmed replaces the whole armed set with req: NAS arms what is missing or
// changed and cancels what is not listed. Empty dedup keys are filled in.
// Each arm's FlexSeconds is sent as in Provision (omitted when 0).
func (c *Client) PutArmed(ctx context.Context, req contract.PutArmedRequest) (contract.PutArmedResponse, error) {
	arms := make([]contract.DesiredArm, len(req.Armed))
	for i, a := range req.Armed {
		if err := checkFlex(a.JobID, a.FlexSeconds); err != nil {
			return contract.PutArmedResponse{}, fmt.Errorf("nasclient: put armed: %w", err)
		}
		if a.DedupKey == "" {
			a.DedupKey = DedupKey(a.JobID, a.FireAt.Time)
		}
		arms[i] = a
	}
	req.Armed = arms
	var out contract.PutArmedResponse
	err := c.call(ctx, request{op: "put armed", method: http.MethodPut, path: contract.PathArmed, in: req, out: &out})
	return out, err
}

// request is one logical call to NAS.
type request struct {
	op     string     // names the call in errors and logs, e.g. "provision"
	method string     // HTTP method
	path   string     // below the portal URL
	query  url.Values // nil for none
	in     any        // JSON body; nil for none
	out    any        // decodes a 200's body
}

// call performs req with retries and decodes a 200 into req.out. Transient
// failures are retried on the client's backoff schedule, or after NAS's
// Retry-After when it sent one.
func (c *Client) call(ctx context.Context, req request) error {
	var body []byte
	if req.in != nil {
		b, err := json.Marshal(req.in)
		if err != nil {
			return fmt.Errorf("nasclient: %s: encode: %w", req.op, err)
		}
		body = b
	}
	u := *c.base
	u.Path = c.base.Path + req.path
	u.RawQuery = req.query.Encode()
	target := u.String()
	r := backoff.Retrier{
		Policy:      backoff.Policy{Base: c.cfg.BaseBackoff, Max: c.cfg.MaxBackoff, Jitter: backoff.JitterUpperHalf},
		MaxAttempts: c.cfg.MaxAttempts,
		MaxWait:     c.cfg.MaxRetryAfter,
		OnRetry: func(attempt int, wait time.Duration, err error) {
			c.cfg.Logger.Debug("nasclient: retrying", "op", req.op, "attempt", attempt, "wait", wait.String(), "error", err)
		},
	}
	err := r.Do(ctx, func(ctx context.Context, _ int) error {
		return c.attempt(ctx, req, target, body)
	})
	if stopped := (*backoff.StoppedError)(nil); errors.As(err, &stopped) {
		return fmt.Errorf("nasclient: %s: %w", req.op, err)
	}
	return err
}

// attempt makes one request of req to target with body. A failure not worth
// retrying is backoff.Permanent; one with a Retry-After is backoff.After.
func (c *Client) attempt(ctx context.Context, req request, target string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	op := req.op
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, target, rd)
	if err != nil {
		return backoff.Permanent(fmt.Errorf("nasclient: %s: %w", op, err))
	}
	hreq.Header.Set(contract.HeaderAuthorization, contract.BearerPrefix+c.token)
	hreq.Header.Set("Accept", contract.MediaTypeJSON)
	hreq.Header.Set("User-Agent", c.cfg.UserAgent)
	if body != nil {
		hreq.Header.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	}
	sent := c.cfg.Now()
	resp, err := c.hc.Do(hreq)
	if err == nil && c.cfg.Clock != nil {
		if date, derr := http.ParseTime(resp.Header.Get("Date")); derr == nil {
			c.cfg.Clock.ObserveDate(sent, c.cfg.Now(), date)
		}
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return backoff.Permanent(fmt.Errorf("nasclient: %s: %w", op, err))
		}
		return fmt.Errorf("nasclient: %s: %w", op, err) // network or timeout: transient
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("nasclient: %s: reading the answer: %w", op, err)
	}
	if int64(len(data)) > c.cfg.MaxResponseBytes {
		return backoff.Permanent(fmt.Errorf("nasclient: %s: %w (%d bytes)", op, ErrResponseTooLarge, c.cfg.MaxResponseBytes))
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, req.out); err != nil {
			return backoff.Permanent(fmt.Errorf("nasclient: %s: decoding the answer: %w", op, err))
		}
		return nil
	}
	return answerError(op, resp, data)
}

// answerError is NAS's refusal resp (body data) of op as a typed error,
// marked for retrying (with NAS's Retry-After) when it is transient: 429 and
// the 5xx that may pass.
func answerError(op string, resp *http.Response, data []byte) error {
	apiErr := &APIError{StatusCode: resp.StatusCode, Op: op, RetryAfter: parseRetryAfter(resp.Header.Get(contract.HeaderRetryAfter), time.Now())}
	var eb contract.Error
	if json.Unmarshal(data, &eb) == nil && eb.Code != "" {
		apiErr.Code, apiErr.Description = eb.Code, eb.Description
	} else {
		apiErr.Description = http.StatusText(resp.StatusCode)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests,
		resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented && resp.StatusCode != http.StatusHTTPVersionNotSupported:
		return backoff.After(typed(apiErr), apiErr.RetryAfter)
	default:
		return backoff.Permanent(typed(apiErr))
	}
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
