package nas

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
	"gopkg.in/yaml.v3"
)

// Identity is who an agent token belongs to.
type Identity struct {
	AgentID    string
	InstanceID string
}

// AgentVerifier turns a bearer token into the identity of a provisioned agent.
// It returns an error wrapping ErrInvalidToken for a token that cannot be
// verified (401) and ErrUnknownAgent for a token that is well formed but not
// a provisioned agent (403 invalid_client).
type AgentVerifier interface {
	VerifyAgent(ctx context.Context, token string) (Identity, error)
}

// Errors of agent verification.
var (
	ErrInvalidToken = errors.New("invalid agent token")
	ErrUnknownAgent = errors.New("not a provisioned agent")
)

// AgentEntry is one line of the agents file.
type AgentEntry struct {
	AgentID     string `yaml:"agent_id"`
	InstanceID  string `yaml:"instance_id"`
	TokenSHA256 string `yaml:"token_sha256"`
}

// TokenSHA256 returns the hex SHA-256 of a token, as the agents file stores it.
func TokenSHA256(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ParseAgents reads an agents file: a YAML list of AgentEntry.
func ParseAgents(data []byte) ([]AgentEntry, error) {
	var entries []AgentEntry
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&entries); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("agents file: %w", err)
	}
	seen := map[string]bool{}
	for i, e := range entries {
		if e.AgentID == "" || e.InstanceID == "" {
			return nil, fmt.Errorf("agents file: entry %d: agent_id and instance_id are required", i)
		}
		h, err := hex.DecodeString(e.TokenSHA256)
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("agents file: entry %d (%s): token_sha256 must be 64 hex digits", i, e.AgentID)
		}
		entries[i].TokenSHA256 = strings.ToLower(e.TokenSHA256)
		if seen[entries[i].TokenSHA256] {
			return nil, fmt.Errorf("agents file: entry %d (%s): token hash listed twice", i, e.AgentID)
		}
		seen[entries[i].TokenSHA256] = true
	}
	return entries, nil
}

// AgentsFile verifies opaque tokens against an agents file of token hashes.
// The file is re-read when its size or modification time changes (checked at
// most once per CheckEvery). Safe for concurrent use.
type AgentsFile struct {
	path       string
	checkEvery time.Duration

	mu        sync.Mutex
	entries   []agentHash
	stamp     string
	lastCheck time.Time
}

type agentHash struct {
	id   Identity
	hash [sha256.Size]byte
}

var _ AgentVerifier = (*AgentsFile)(nil)

// OpenAgentsFile loads path; checkEvery bounds how often it is re-checked.
func OpenAgentsFile(path string, checkEvery time.Duration) (*AgentsFile, error) {
	f := &AgentsFile{path: path, checkEvery: checkEvery}
	if err := f.reload(time.Now(), true); err != nil {
		return nil, err
	}
	return f, nil
}

// NewStaticAgents verifies against a fixed list (no file).
func NewStaticAgents(entries []AgentEntry) (*AgentsFile, error) {
	f := &AgentsFile{}
	hs, err := hashesOf(entries)
	if err != nil {
		return nil, err
	}
	f.entries = hs
	return f, nil
}

func hashesOf(entries []AgentEntry) ([]agentHash, error) {
	out := make([]agentHash, 0, len(entries))
	for i, e := range entries {
		h, err := hex.DecodeString(e.TokenSHA256)
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("agents: entry %d: token_sha256 must be 64 hex digits", i)
		}
		var a agentHash
		a.id = Identity{AgentID: e.AgentID, InstanceID: e.InstanceID}
		copy(a.hash[:], h)
		out = append(out, a)
	}
	return out, nil
}

func (f *AgentsFile) reload(now time.Time, force bool) error {
	if f.path == "" {
		return nil
	}
	if !force && now.Sub(f.lastCheck) < f.checkEvery {
		return nil
	}
	f.lastCheck = now
	info, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("agents file: %w", err)
	}
	stamp := fmt.Sprintf("%d:%d", info.Size(), info.ModTime().UnixNano())
	if stamp == f.stamp {
		return nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("agents file: %w", err)
	}
	entries, err := ParseAgents(data)
	if err != nil {
		return err
	}
	hs, err := hashesOf(entries)
	if err != nil {
		return err
	}
	f.entries, f.stamp = hs, stamp
	return nil
}

// VerifyAgent implements AgentVerifier. Every entry is compared in constant
// time, so the time taken does not depend on which entry matched.
func (f *AgentsFile) VerifyAgent(_ context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, fmt.Errorf("agents file: %w: empty token", ErrInvalidToken)
	}
	f.mu.Lock()
	// A failed reload keeps the previous entries: a half-written file must
	// not lock every agent out.
	_ = f.reload(time.Now(), false)
	entries := f.entries
	f.mu.Unlock()
	sum := sha256.Sum256([]byte(token))
	var found Identity
	match := 0
	for _, e := range entries {
		if subtle.ConstantTimeCompare(sum[:], e.hash[:]) == 1 {
			found = e.id
			match = 1
		}
	}
	if match == 0 {
		return Identity{}, fmt.Errorf("agents file: %w", ErrUnknownAgent)
	}
	return found, nil
}

// JWTAgents verifies JWT access tokens against an issuer's JWKS: `sub` is the
// agent id and the `instance_id` claim the instance; `iss`, `aud` and `exp`
// are required and checked, `kid` is required, the methods are pinned.
type JWTAgents struct {
	Issuer   string
	Audience string
	keys     keyfunc.Keyfunc
	parser   *jwt.Parser
}

var _ AgentVerifier = (*JWTAgents)(nil)

// agentAccessMethods are the signature algorithms accepted for access tokens:
// asymmetric only, never none or HMAC.
var agentAccessMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"}

// NewJWTAgents fetches the issuer's JWKS (the context bounds the refresh
// goroutine) with a client that has a timeout and a capped body.
func NewJWTAgents(ctx context.Context, issuer, audience, jwksURL string) (*JWTAgents, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: cappedTransport{base: http.DefaultTransport, limit: 1 << 20}}
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{jwksURL}, keyfunc.Override{
		Client:      client,
		HTTPTimeout: 10 * time.Second,
		// A JWKS that was down at start is loaded at the next refresh; until
		// then readiness reports the keys missing.
		RefreshInterval:   5 * time.Minute,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(30*time.Second), 2),
	})
	if err != nil {
		return nil, fmt.Errorf("agent jwt: %w", err)
	}
	return NewJWTAgentsKeyfunc(issuer, audience, kf), nil
}

// NewJWTAgentsKeyfunc verifies with an existing keyfunc.
func NewJWTAgentsKeyfunc(issuer, audience string, kf keyfunc.Keyfunc) *JWTAgents {
	return &JWTAgents{
		Issuer: issuer, Audience: audience, keys: kf,
		parser: jwt.NewParser(
			jwt.WithValidMethods(agentAccessMethods),
			jwt.WithIssuer(issuer),
			jwt.WithAudience(audience),
			jwt.WithExpirationRequired(),
			jwt.WithLeeway(30*time.Second),
		),
	}
}

// Ready reports whether the issuer's keys have been loaded: until they are,
// every token would be refused, so readiness waits for them.
func (j *JWTAgents) Ready(ctx context.Context) error {
	keys, err := j.keys.Storage().KeyReadAll(ctx)
	if err != nil {
		return fmt.Errorf("agent jwks: %w", err)
	}
	if len(keys) == 0 {
		return errors.New("agent jwks: no keys loaded yet")
	}
	return nil
}

// accessClaims are the claims of an agent access token.
type accessClaims struct {
	jwt.RegisteredClaims
	InstanceID string `json:"instance_id"`
}

// VerifyAgent implements AgentVerifier.
func (j *JWTAgents) VerifyAgent(ctx context.Context, token string) (Identity, error) {
	var claims accessClaims
	_, err := j.parser.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		if kid, _ := t.Header["kid"].(string); kid == "" {
			return nil, errors.New("token has no kid")
		}
		return j.keys.KeyfuncCtx(ctx)(t)
	})
	if err != nil {
		return Identity{}, fmt.Errorf("agent jwt: %w: %w", ErrInvalidToken, err)
	}
	if claims.Subject == "" || claims.InstanceID == "" {
		return Identity{}, fmt.Errorf("agent jwt: %w: sub and instance_id are required", ErrUnknownAgent)
	}
	return Identity{AgentID: claims.Subject, InstanceID: claims.InstanceID}, nil
}

// MultiVerifier sends JWT-shaped tokens (three dot-separated parts) to JWT
// and everything else to Opaque; either may be nil.
type MultiVerifier struct {
	Opaque AgentVerifier
	JWT    AgentVerifier
}

var _ AgentVerifier = MultiVerifier{}

// Ready reports whether the JWT verifier, if any and if it can tell, is ready.
func (m MultiVerifier) Ready(ctx context.Context) error {
	if r, ok := m.JWT.(readier); ok {
		return r.Ready(ctx)
	}
	return nil
}

// readier is implemented by verifiers that load keys before they can work.
type readier interface {
	Ready(ctx context.Context) error
}

// VerifyAgent implements AgentVerifier.
func (m MultiVerifier) VerifyAgent(ctx context.Context, token string) (Identity, error) {
	if strings.Count(token, ".") == 2 && m.JWT != nil {
		return m.JWT.VerifyAgent(ctx, token)
	}
	if m.Opaque != nil {
		return m.Opaque.VerifyAgent(ctx, token)
	}
	return Identity{}, fmt.Errorf("%w: no verifier for this kind of token", ErrUnknownAgent)
}

// cappedTransport caps response bodies at limit bytes.
type cappedTransport struct {
	base  http.RoundTripper
	limit int64
}

// RoundTrip implements http.RoundTripper: a body longer than the limit reads
// as if it ended there.
func (t cappedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = cappedBody{Reader: io.LimitReader(resp.Body, t.limit), Closer: resp.Body}
	return resp, nil
}

// cappedBody reads through a limit and closes the original body.
type cappedBody struct {
	io.Reader
	io.Closer
}
