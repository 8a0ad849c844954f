package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// DefaultCallLimit is how much of an answer Call.Send reads when Limit is
// not set.
const DefaultCallLimit = 16 << 20

// Call is one call of a JSON API that answers errors with the error body
// (Error): the client side of WriteJSON and WriteError.
type Call struct {
	// Method and URL say what is called.
	Method, URL string
	// Token, when not empty, is sent as the bearer token.
	Token string
	// Body, when not nil, is sent as JSON.
	Body any
	// Limit is how many bytes of the answer are read at most (default
	// DefaultCallLimit); the rest is left unread.
	Limit int64
}

// Send sends the call with hc and returns the answer's status and body. An
// error means no answer was read: the body could not be encoded, the call
// failed, or its answer could not be read.
func (c Call) Send(ctx context.Context, hc *http.Client) (status int, body []byte, err error) {
	var rd io.Reader
	if c.Body != nil {
		b, err := json.Marshal(c.Body)
		if err != nil {
			return 0, nil, fmt.Errorf("encoding the body: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, c.Method, c.URL, rd)
	if err != nil {
		return 0, nil, err
	}
	if c.Body != nil {
		req.Header.Set(HeaderContentType, MediaTypeJSON)
	}
	if c.Token != "" {
		req.Header.Set(HeaderAuthorization, BearerPrefix+c.Token)
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	limit := c.Limit
	if limit <= 0 {
		limit = DefaultCallLimit
	}
	body, err = io.ReadAll(io.LimitReader(res.Body, limit))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return res.StatusCode, body, nil
}

// ErrorBody decodes data as the error body of an answer; ok is false when it
// is not one (not JSON, or without an error code).
func ErrorBody(data []byte) (e *Error, ok bool) {
	e = &Error{}
	if json.Unmarshal(data, e) != nil || e.Code == "" {
		return nil, false
	}
	return e, true
}
