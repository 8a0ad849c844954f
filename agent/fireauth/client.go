package fireauth

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ErrBodyTooLarge is returned while reading a response that exceeds the cap
// of a client made by NewJWKSClient.
var ErrBodyTooLarge = errors.New("response body exceeds the limit")

// NewJWKSClient returns an HTTP client for fetching a key set: every request
// is bounded by timeout and every response body by maxBytes (a longer body
// fails the read with ErrBodyTooLarge instead of being buffered).
func NewJWKSClient(timeout time.Duration, maxBytes int64) *http.Client {
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: &CappedTransport{Base: base, MaxBytes: maxBytes},
	}
}

// CappedTransport is an http.RoundTripper that limits how many bytes of each
// response body can be read.
type CappedTransport struct {
	// Base does the round trip; http.DefaultTransport when nil.
	Base http.RoundTripper
	// MaxBytes is the most body bytes a response may have.
	MaxBytes int64
}

// RoundTrip implements http.RoundTripper.
func (t *CappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.MaxBytes {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("fireauth: %w: %d bytes announced, the limit is %d", ErrBodyTooLarge, resp.ContentLength, t.MaxBytes)
	}
	resp.Body = &cappedBody{rc: resp.Body, left: t.MaxBytes}
	return resp, nil
}

// cappedBody reads at most left bytes and fails if the body has more.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// Anything beyond the cap is an error, not a silent truncation.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, ErrBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
