package inputs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/notify"
)

// HTTPResolver fetches http(s):// inputs through a client that refuses, at
// dial time, every address Addresses refuses, follows no redirects and uses
// no proxy. The answer must be 200 with text/plain (one item per line, as
// a file) or application/json (an array of strings; blank ones are left
// out), at most MaxBytes,
// within Timeout.
type HTTPResolver struct {
	Addresses notify.AddressPolicy
	Timeout   time.Duration
}

// Check validates the URL and refuses a host naming or resolving to an
// address the policy refuses.
func (h *HTTPResolver) Check(ctx context.Context, u *url.URL) error {
	t := notify.Target{Kind: notify.KindWebhook, URL: u.String()}
	if err := notify.ValidateTarget(ctx, t, notify.ValidateOptions{Addresses: h.Addresses}); errors.Is(err, notify.ErrAddressNotAllowed) {
		return fmt.Errorf("%w: %w (to allow it, set notify.allow_private: true or list its prefix in notify.allow in the agent config)", ErrInvalid, err)
	} else if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Resolve fetches the items.
func (h *HTTPResolver) Resolve(ctx context.Context, u *url.URL) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	req.Header.Set("Accept", "text/plain, application/json")
	c := notify.NewClient(h.Addresses, h.Timeout)
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		var ne net.Error
		if ctx.Err() == context.DeadlineExceeded || errors.As(err, &ne) && ne.Timeout() {
			err = fmt.Errorf("%w (timeout after %s)", err, h.Timeout) // say which limit ended it
		}
		return nil, fmt.Errorf("inputs: fetch %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("inputs: fetch %s: status %d (redirects are not followed)", u.Redacted(), resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("inputs: fetch %s: %w", u.Redacted(), err)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("inputs: fetch %s: body larger than %d bytes", u.Redacted(), MaxBytes)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/plain":
		return Lines(b), nil
	case "application/json":
		var items []string
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, fmt.Errorf("inputs: fetch %s: want a JSON array of strings: %w", u.Redacted(), err)
		}
		out := items[:0]
		for _, it := range items {
			if it = strings.TrimSpace(it); it != "" {
				out = append(out, it)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("inputs: fetch %s: content type %q, want text/plain or application/json", u.Redacted(), mt)
}
