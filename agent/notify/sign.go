package notify

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/internal/atomicfile"
)

// Standard Webhooks v1 headers.
const (
	HeaderID             = "webhook-id"
	HeaderTimestamp      = "webhook-timestamp"
	HeaderSignature      = "webhook-signature"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// secretPrefix starts the text form of a signing secret.
const secretPrefix = "whsec_"

// Secret is a Standard Webhooks signing key.
type Secret []byte

// ParseSecret reads "whsec_<base64>" (the prefix is optional).
func ParseSecret(s string) (Secret, error) {
	raw := strings.TrimPrefix(strings.TrimSpace(s), secretPrefix)
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("notify: webhook secret is not base64: %w", err)
	}
	if len(key) < 16 || len(key) > 64 {
		return nil, fmt.Errorf("notify: webhook secret must be 16 to 64 bytes, got %d", len(key))
	}
	return Secret(key), nil
}

// NewSecret returns a random 32-byte secret.
func NewSecret() Secret {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // crypto/rand.Read never fails
	return Secret(k)
}

// String returns the "whsec_<base64>" form a receiver is configured with.
func (s Secret) String() string { return secretPrefix + base64.StdEncoding.EncodeToString(s) }

// Sign returns the webhook-signature value "v1,<base64 HMAC-SHA256>" over
// "id.timestamp.body".
func (s Secret) Sign(id string, at time.Time, body []byte) string {
	m := hmac.New(sha256.New, s)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(at.Unix(), 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// SecretFile is the file in the notify directory that holds the agent's
// webhook secret.
const SecretFile = "webhook-secret"

// LoadOrCreateSecret reads the agent's webhook secret from dir, creating
// it (mode 0600, created exclusively so racing processes agree) if absent.
func LoadOrCreateSecret(dir string) (Secret, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("notify: create %s: %w", dir, err)
	}
	path := filepath.Join(dir, SecretFile)
	for range 2 {
		b, err := os.ReadFile(path)
		if err == nil {
			return ParseSecret(string(b))
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("notify: read secret: %w", err)
		}
		if err := writeSecret(path); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
	}
	return nil, errors.New("notify: secret file vanished while being created")
}

// writeSecret writes a new secret whole or not at all; a racing writer
// loses with an error matching os.ErrExist.
func writeSecret(path string) error {
	if err := atomicfile.Create(path, []byte(NewSecret().String()+"\n"), 0o600); err != nil {
		if errors.Is(err, os.ErrExist) {
			return err
		}
		return fmt.Errorf("notify: install secret: %w", err)
	}
	return nil
}
