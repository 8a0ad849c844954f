package contract

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks v1 signing of relay calls.
const (
	// WebhookSecretPrefix starts a secret written as text: whsec_ + base64(key).
	WebhookSecretPrefix = "whsec_"
	// WebhookTolerance is how far a webhook-timestamp may be from now, either way.
	WebhookTolerance  = 5 * time.Minute
	webhookSigVersion = "v1,"
	minSecretBytes    = 24
	maxWebhookIDLen   = 256
)

// ErrWebhookSignature is returned (wrapped) by VerifyWebhook for any call that
// is forged, altered, stale or malformed.
var ErrWebhookSignature = errors.New("invalid webhook signature")

// ParseWebhookSecret reads a secret written as whsec_ + base64 of its key
// bytes, ignoring surrounding white space. Keys shorter than 24 bytes are refused.
func ParseWebhookSecret(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, WebhookSecretPrefix) {
		return nil, fmt.Errorf("webhook secret: must start with %q", WebhookSecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, WebhookSecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("webhook secret: base64: %w", err)
	}
	if len(key) < minSecretBytes {
		return nil, fmt.Errorf("webhook secret: key is %d bytes, want at least %d", len(key), minSecretBytes)
	}
	return key, nil
}

// FormatWebhookSecret writes key as whsec_ + base64(key).
func FormatWebhookSecret(key []byte) string {
	return WebhookSecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// SignWebhook returns the webhook-signature value for one secret:
// "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)).
func SignWebhook(key []byte, id string, ts time.Time, body []byte) string {
	return webhookSigVersion + base64.StdEncoding.EncodeToString(webhookMAC(key, id, strconv.FormatInt(ts.Unix(), 10), body))
}

// WebhookHeaders returns the three headers of a call signed with every key
// (the first is the current secret; the others let receivers rotate).
func WebhookHeaders(keys [][]byte, id string, ts time.Time, body []byte) map[string]string {
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		sigs = append(sigs, SignWebhook(k, id, ts, body))
	}
	return map[string]string{
		HeaderWebhookID:        id,
		HeaderWebhookTimestamp: strconv.FormatInt(ts.Unix(), 10),
		HeaderWebhookSignature: strings.Join(sigs, " "),
	}
}

func webhookMAC(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// WebhookCall is one signed call as it was received: its three webhook
// headers and its exact body.
type WebhookCall struct {
	// ID is the webhook-id header.
	ID string
	// Timestamp is the webhook-timestamp header: Unix seconds.
	Timestamp string
	// Signature is the webhook-signature header: space-separated v1
	// signatures.
	Signature string
	// Body is the request body, byte for byte.
	Body []byte
}

// WebhookVerifyOptions say whom VerifyWebhook trusts and when it checks.
type WebhookVerifyOptions struct {
	// Keys are the secrets a signature may be made with (current first,
	// then those still accepted during a rotation).
	Keys [][]byte
	// Now is the receiver's clock reading; zero means time.Now().
	Now time.Time
	// Tolerance is how far the timestamp may be from Now, either way; zero
	// means WebhookTolerance.
	Tolerance time.Duration
}

// VerifyWebhook checks a signed call: the timestamp within the tolerance of
// now in both directions, and at least one space-separated v1 signature
// matching any of the keys. It compares in constant time.
func VerifyWebhook(call WebhookCall, opts WebhookVerifyOptions) error {
	id, timestamp, keys, body := call.ID, call.Timestamp, opts.Keys, call.Body
	now, tolerance := opts.Now, opts.Tolerance
	if now.IsZero() {
		now = time.Now()
	}
	if tolerance == 0 {
		tolerance = WebhookTolerance
	}
	if id == "" || len(id) > maxWebhookIDLen {
		return fmt.Errorf("%w: missing or oversized %s", ErrWebhookSignature, HeaderWebhookID)
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || timestamp == "" || timestamp[0] == '+' {
		return fmt.Errorf("%w: malformed %s", ErrWebhookSignature, HeaderWebhookTimestamp)
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp outside the %s tolerance", ErrWebhookSignature, tolerance)
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no secret configured", ErrWebhookSignature)
	}
	for _, sig := range strings.Fields(call.Signature) {
		enc, ok := strings.CutPrefix(sig, webhookSigVersion)
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			continue
		}
		for _, k := range keys {
			if hmac.Equal(got, webhookMAC(k, id, timestamp, body)) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no signature matches", ErrWebhookSignature)
}
