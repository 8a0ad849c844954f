// Package cronkey provides the per-job cron keys of direct delivery: minting
// a key and its id, sealing it for the store under the operator's
// encryption key (AES-256-GCM, bound to the job it belongs to), and signing
// a direct fire token with it (HS256, contract.FireClaims).
//
// NAS mints and seals a key at provision; a dispatcher, in NAS or in a
// chronos relay process, opens it to sign the fire. Neither the key nor its
// sealed form is ever logged.
package cronkey

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/chronoscron/chronos/contract"
	"github.com/golang-jwt/jwt/v5"
)

// Key is a job's cron key and its id.
type Key struct {
	// ID names the key (contract.CronKeyIDPrefix and 22 base64url
	// characters); it is the `kid` of the tokens the key signs.
	ID string
	// Secret is the key itself, contract.CronKeyBytes bytes.
	Secret []byte
}

// Encoded returns the key as the provision answer carries it: unpadded
// base64url.
func (k Key) Encoded() string { return base64.RawURLEncoding.EncodeToString(k.Secret) }

// String never shows the secret, so that a key printed by mistake leaks
// nothing.
func (k Key) String() string { return "cronkey(" + k.ID + ")" }

// Mint returns a fresh random key with a fresh id.
func Mint() (Key, error) {
	secret := make([]byte, contract.CronKeyBytes)
	if _, err := rand.Read(secret); err != nil {
		return Key{}, fmt.Errorf("cron key: %w", err)
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Key{}, fmt.Errorf("cron key id: %w", err)
	}
	return Key{ID: contract.CronKeyIDPrefix + base64.RawURLEncoding.EncodeToString(id[:]), Secret: secret}, nil
}

// Decode parses a key as the provision answer carries it.
func Decode(id, encoded string) (Key, error) {
	secret, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil || len(secret) != contract.CronKeyBytes {
		return Key{}, errors.New("cron key: not the base64url of a 32-byte key")
	}
	if !strings.HasPrefix(id, contract.CronKeyIDPrefix) || len(id) > 64 {
		return Key{}, errors.New("cron key: malformed key id")
	}
	return Key{ID: id, Secret: secret}, nil
}

// sealedPrefix starts every sealed key: the format's version.
const sealedPrefix = "v1."

// Sealer seals cron keys for the store and opens them again, under the
// operator's encryption key. It is safe for concurrent use.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer returns a Sealer under a 32-byte encryption key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("cron key encryption key: %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("cron key encryption key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("cron key encryption key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// LoadSealer reads the encryption key file at path: 32 bytes written as
// base64 (standard or URL alphabet, padded or not) or as 64 hex digits,
// surrounding white space ignored. A file its group or others may read is
// refused: the key opens every job's cron key.
func LoadSealer(path string) (*Sealer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cron key encryption key file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cron key encryption key file: %w", err)
	}
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cron key encryption key file %s is readable by group or others (mode %04o): run chmod 600 %s", path, info.Mode().Perm(), path)
	}
	raw := make([]byte, 4096)
	n, err := f.Read(raw)
	if err != nil {
		return nil, fmt.Errorf("cron key encryption key file %s: %w", path, err)
	}
	key, err := ParseEncryptionKey(string(raw[:n]))
	if err != nil {
		return nil, fmt.Errorf("cron key encryption key file %s: %w", path, err)
	}
	return NewSealer(key)
}

// ParseEncryptionKey decodes an encryption key as LoadSealer reads it.
func ParseEncryptionKey(text string) ([]byte, error) {
	text = strings.TrimSpace(text)
	if len(text) == 64 {
		if b, err := hex.DecodeString(text); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(text); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	return nil, errors.New("not 32 bytes in base64 or hex (make one with: head -c 32 /dev/urandom | base64)")
}

// GenerateEncryptionKey returns a fresh encryption key as LoadSealer reads
// it (standard base64 and a newline).
func GenerateEncryptionKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("cron key encryption key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b) + "\n", nil
}

// binding is the additional data a sealed key is bound to: a sealed key
// copied to another job's row does not open.
func binding(agentID, jobID string) []byte { return []byte(agentID + "\x00" + jobID) }

// Seal returns k sealed for the store row of (agentID, jobID).
func (s *Sealer) Seal(agentID, jobID string, k Key) (string, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(k.ID)+1+len(k.Secret)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal cron key: %w", err)
	}
	plain := append(append([]byte(k.ID), 0), k.Secret...)
	out := s.aead.Seal(nonce, nonce, plain, binding(agentID, jobID))
	return sealedPrefix + base64.RawURLEncoding.EncodeToString(out), nil
}

// ErrOpen is returned by Open for a sealed key that does not open under this
// Sealer's key, or that was sealed for another job.
var ErrOpen = errors.New("cron key: cannot open the sealed key (another encryption key, or another job's)")

// Open returns the key sealed for (agentID, jobID).
func (s *Sealer) Open(agentID, jobID, sealed string) (Key, error) {
	rest, ok := strings.CutPrefix(sealed, sealedPrefix)
	if !ok {
		return Key{}, ErrOpen
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(raw) < s.aead.NonceSize()+s.aead.Overhead() {
		return Key{}, ErrOpen
	}
	ns := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:ns], raw[ns:], binding(agentID, jobID))
	if err != nil {
		return Key{}, ErrOpen
	}
	id, secret, ok := strings.Cut(string(plain), "\x00")
	if !ok || len(secret) != contract.CronKeyBytes {
		return Key{}, ErrOpen
	}
	return Key{ID: id, Secret: []byte(secret)}, nil
}

// Sign returns a direct fire token for claims signed under k: HS256, `typ`
// contract.TokenTypeCronFire, `kid` k.ID.
func Sign(k Key, claims *contract.FireClaims) (string, error) {
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["typ"] = contract.TokenTypeCronFire
	tok.Header["kid"] = k.ID
	s, err := tok.SignedString(k.Secret)
	if err != nil {
		return "", fmt.Errorf("sign direct fire token: %w", err)
	}
	return s, nil
}
