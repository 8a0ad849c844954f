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
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
	"gopkg.in/yaml.v3"

	"github.com/chronoscron/chronos/contract"
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

// AgentEntry is one line of the agents file. TokenSHA256 lets an opaque
// token authenticate as the entry; SessionID lets a JWT access token whose
// session claim (agent_jwt.session_claim) equals it authenticate as the
// entry: a hosted agent's token names a session, not an instance. At least
// one of the two is required.
//
// Parallelism, Rate and Disabled are the agent's own flow control (see
// relay.AgentPolicy), which NAS writes to the store on load and on every
// reload: Parallelism (at least 1) and Rate (deliveries per second, above 0)
// override relay.per_agent.*, and Disabled holds every fire of the agent and
// refuses its calls until the entry no longer says so. Entries of one agent
// (one per instance) that set a field must agree on it.
//
// Delivery is the delivery mode NAS allows the agent: "direct" lets a
// provision that asks for it (contract.DeliveryDirect) arm the job for
// direct delivery under a per-job cron key; "" or "nas" keeps every fire
// NAS-mediated. Any other value is refused when the file is loaded.
type AgentEntry struct {
	AgentID     string   `yaml:"agent_id"`
	InstanceID  string   `yaml:"instance_id"`
	TokenSHA256 string   `yaml:"token_sha256"`
	SessionID   string   `yaml:"session_id"`
	Parallelism *int     `yaml:"parallelism"`
	Rate        *float64 `yaml:"rate"`
	Disabled    bool     `yaml:"disabled"`
	Delivery    string   `yaml:"delivery"`
}

// FilePolicy is what the agents file says of one agent's flow control: a
// nil field leaves the store's value as it is.
type FilePolicy struct {
	// Parallelism, when set, bounds the agent's deliveries in flight.
	Parallelism *int
	// Rate, when set, bounds the agent's deliveries per second.
	Rate *float64
	// Disabled forces the agent disabled.
	Disabled bool
	// Direct allows the agent direct delivery (delivery: direct).
	Direct bool
}

// AgentPolicySource is the part of a verifier that sets agents' flow
// control: the agents file. NAS finds it in the verifier it is given
// (directly, or inside a MultiVerifier or the session resolver of a
// JWTAgents) and applies it to the store.
type AgentPolicySource interface {
	// AgentPolicies returns the policy of every agent the source lists (one
	// with no field set too) and a generation that changes whenever the
	// source was loaded again. The map must not be modified.
	AgentPolicies() (map[string]FilePolicy, uint64)
}

// InstanceSource is the part of a verifier that lists agent instances: the
// agents file. NAS finds it as it finds the AgentPolicySource and asks it
// whether an operator's instance id names an instance it knows.
type InstanceSource interface {
	// KnowsInstance reports whether the source lists instanceID.
	KnowsInstance(instanceID string) bool
}

// maxSessionID bounds a session_id.
const maxSessionID = 512

// TokenSHA256 returns the hex SHA-256 of a token, as the agents file stores it.
func TokenSHA256(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ParseAgents reads an agents file: a YAML list of AgentEntry. Every entry
// needs agent_id, instance_id and a token_sha256 or a session_id; a token
// hash or a session id listed twice is an error.
func ParseAgents(data []byte) ([]AgentEntry, error) {
	var entries []AgentEntry
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&entries); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("agents file: %w", err)
	}
	if err := checkAgents(entries); err != nil {
		return nil, fmt.Errorf("agents file: %w", err)
	}
	for i := range entries {
		entries[i].TokenSHA256 = strings.ToLower(entries[i].TokenSHA256)
	}
	return entries, nil
}

// checkAgents validates entries as ParseAgents documents.
func checkAgents(entries []AgentEntry) error {
	hashes, sessions := map[string]bool{}, map[string]bool{}
	for i, e := range entries {
		if e.AgentID == "" || e.InstanceID == "" {
			return fmt.Errorf("entry %d: agent_id and instance_id are required", i)
		}
		if e.TokenSHA256 == "" && e.SessionID == "" {
			return fmt.Errorf("entry %d (%s): token_sha256 or session_id is required", i, e.AgentID)
		}
		if e.TokenSHA256 != "" {
			h, err := hex.DecodeString(e.TokenSHA256)
			if err != nil || len(h) != sha256.Size {
				return fmt.Errorf("entry %d (%s): token_sha256 must be 64 hex digits", i, e.AgentID)
			}
			lower := strings.ToLower(e.TokenSHA256)
			if hashes[lower] {
				return fmt.Errorf("entry %d (%s): token hash listed twice", i, e.AgentID)
			}
			hashes[lower] = true
		}
		if e.SessionID != "" {
			if len(e.SessionID) > maxSessionID || strings.IndexFunc(e.SessionID, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
				return fmt.Errorf("entry %d (%s): session_id must be 1 to %d characters without spaces or control characters", i, e.AgentID, maxSessionID)
			}
			if sessions[e.SessionID] {
				return fmt.Errorf("entry %d (%s): session_id %q listed twice", i, e.AgentID, e.SessionID)
			}
			sessions[e.SessionID] = true
		}
		if err := checkPolicyFields(e); err != nil {
			return fmt.Errorf("entry %d (%s): %w", i, e.AgentID, err)
		}
	}
	_, err := agentPolicies(entries)
	return err
}

// checkPolicyFields checks an entry's flow-control fields.
func checkPolicyFields(e AgentEntry) error {
	if e.Parallelism != nil && *e.Parallelism < 1 {
		return fmt.Errorf("parallelism %d must be at least 1 (leave it out for relay.per_agent.parallelism)", *e.Parallelism)
	}
	if e.Rate != nil && !(*e.Rate > 0 && !math.IsInf(*e.Rate, 0)) {
		return fmt.Errorf("rate %v must be a positive number of deliveries per second (leave it out for relay.per_agent.rate)", *e.Rate)
	}
	if !contract.ValidDelivery(e.Delivery) {
		return fmt.Errorf("delivery %q is not %s or %s (leave it out for %s)", e.Delivery, contract.DeliveryNAS, contract.DeliveryDirect, contract.DeliveryNAS)
	}
	return nil
}

// agentPolicies gathers the flow control of each agent of checked entries;
// entries of one agent that set a field to different values are an error.
func agentPolicies(entries []AgentEntry) (map[string]FilePolicy, error) {
	out := make(map[string]FilePolicy, len(entries))
	for i, e := range entries {
		p, seen := out[e.AgentID]
		if e.Parallelism != nil {
			if p.Parallelism != nil && *p.Parallelism != *e.Parallelism {
				return nil, fmt.Errorf("entry %d (%s): parallelism %d differs from %d in another entry of the agent", i, e.AgentID, *e.Parallelism, *p.Parallelism)
			}
			p.Parallelism = e.Parallelism
		}
		if e.Rate != nil {
			if p.Rate != nil && *p.Rate != *e.Rate {
				return nil, fmt.Errorf("entry %d (%s): rate %v differs from %v in another entry of the agent", i, e.AgentID, *e.Rate, *p.Rate)
			}
			p.Rate = e.Rate
		}
		if seen && e.Disabled != p.Disabled {
			return nil, fmt.Errorf("entry %d (%s): disabled differs between the entries of the agent", i, e.AgentID)
		}
		p.Disabled = e.Disabled
		direct := e.Delivery == contract.DeliveryDirect
		if seen && direct != p.Direct {
			return nil, fmt.Errorf("entry %d (%s): delivery differs between the entries of the agent", i, e.AgentID)
		}
		p.Direct = direct
		out[e.AgentID] = p
	}
	return out, nil
}

// SessionResolver maps the session id of a hosted agent's access token to
// the agent instance it belongs to.
type SessionResolver interface {
	// ResolveSession returns the identity of the entry whose session_id is
	// sessionID, and whether there is one.
	ResolveSession(ctx context.Context, sessionID string) (Identity, bool)
}

// AgentsFile verifies opaque tokens against an agents file of token hashes
// and resolves hosted agents' session ids. The file is re-read when its size
// or modification time changes (checked at most once per CheckEvery). Safe
// for concurrent use.
type AgentsFile struct {
	path       string
	checkEvery time.Duration

	mu        sync.Mutex
	entries   []agentHash
	sessions  map[string]Identity
	instances map[string]bool
	policies  map[string]FilePolicy
	gen       uint64 // counts the loads
	stamp     string
	lastCheck time.Time
}

type agentHash struct {
	id   Identity
	hash [sha256.Size]byte
}

var (
	_ AgentVerifier     = (*AgentsFile)(nil)
	_ SessionResolver   = (*AgentsFile)(nil)
	_ AgentPolicySource = (*AgentsFile)(nil)
	_ InstanceSource    = (*AgentsFile)(nil)
)

// OpenAgentsFile loads path; checkEvery bounds how often it is re-checked.
func OpenAgentsFile(path string, checkEvery time.Duration) (*AgentsFile, error) {
	f := &AgentsFile{path: path, checkEvery: checkEvery}
	if err := f.reload(time.Now()); err != nil {
		return nil, err
	}
	return f, nil
}

// NewStaticAgents verifies against a fixed list (no file), checked as
// ParseAgents checks a file.
func NewStaticAgents(entries []AgentEntry) (*AgentsFile, error) {
	if err := checkAgents(entries); err != nil {
		return nil, fmt.Errorf("agents: %w", err)
	}
	f := &AgentsFile{gen: 1}
	f.entries, f.sessions, f.instances = indexAgents(entries)
	f.policies, _ = agentPolicies(entries)
	return f, nil
}

// indexAgents builds the lookup tables of checked entries: the token hashes,
// the session ids and the instance ids.
func indexAgents(entries []AgentEntry) ([]agentHash, map[string]Identity, map[string]bool) {
	hashes := make([]agentHash, 0, len(entries))
	sessions := map[string]Identity{}
	instances := make(map[string]bool, len(entries))
	for _, e := range entries {
		instances[e.InstanceID] = true
		id := Identity{AgentID: e.AgentID, InstanceID: e.InstanceID}
		if e.TokenSHA256 != "" {
			a := agentHash{id: id}
			h, _ := hex.DecodeString(e.TokenSHA256)
			copy(a.hash[:], h)
			hashes = append(hashes, a)
		}
		if e.SessionID != "" {
			sessions[e.SessionID] = id
		}
	}
	return hashes, sessions, instances
}

// reloadIfDue reloads the file when checkEvery has passed since the last
// check.
func (f *AgentsFile) reloadIfDue(now time.Time) error {
	if now.Sub(f.lastCheck) < f.checkEvery {
		return nil
	}
	return f.reload(now)
}

// reload reads the file again if its size or modification time changed.
func (f *AgentsFile) reload(now time.Time) error {
	if f.path == "" {
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
	policies, err := agentPolicies(entries)
	if err != nil {
		return fmt.Errorf("agents file: %w", err)
	}
	f.entries, f.sessions, f.instances = indexAgents(entries)
	f.policies = policies
	f.gen++
	f.stamp = stamp
	return nil
}

// current returns the entries after a reload check. A failed reload keeps
// the previous entries: a half-written file must not lock every agent out.
func (f *AgentsFile) current() ([]agentHash, map[string]Identity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.reloadIfDue(time.Now())
	return f.entries, f.sessions
}

// AgentPolicies implements AgentPolicySource: the flow control of every
// agent the file lists, after a reload check, and the number of loads so far.
func (f *AgentsFile) AgentPolicies() (map[string]FilePolicy, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.reloadIfDue(time.Now())
	return f.policies, f.gen
}

// KnowsInstance implements InstanceSource: whether an entry of the file, after
// a reload check, names instanceID.
func (f *AgentsFile) KnowsInstance(instanceID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.reloadIfDue(time.Now())
	return f.instances[instanceID]
}

// ResolveSession implements SessionResolver.
func (f *AgentsFile) ResolveSession(_ context.Context, sessionID string) (Identity, bool) {
	_, sessions := f.current()
	id, ok := sessions[sessionID]
	return id, ok
}

// VerifyAgent implements AgentVerifier. Every entry is compared in constant
// time, so the time taken does not depend on which entry matched.
func (f *AgentsFile) VerifyAgent(_ context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, fmt.Errorf("agents file: %w: empty token", ErrInvalidToken)
	}
	entries, _ := f.current()
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

// JWTAgents verifies JWT access tokens against an issuer's JWKS: `iss`,
// `aud` and `exp` are required and checked, `kid` is required, the methods
// are pinned to asymmetric ones. The token names its agent either directly
// (`sub` is the agent id and the `instance_id` claim the instance) or, as a
// hosted agent's token does, through its session claim, which Sessions maps
// to an agents-file entry.
type JWTAgents struct {
	Issuer   string
	Audience string
	// SessionClaim names the session claim (agent_jwt.session_claim).
	// Default DefaultSessionClaim. Set before the first VerifyAgent.
	SessionClaim string
	// Sessions maps session ids to agents; nil maps none. Set before the
	// first VerifyAgent.
	Sessions SessionResolver
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

// VerifyAgent implements AgentVerifier. A token that fails verification is
// ErrInvalidToken (401); a verified token that names no instance and whose
// session maps to no agents-file entry is ErrUnknownAgent (403
// invalid_client). A token naming its instance directly wins over its
// session.
func (j *JWTAgents) VerifyAgent(ctx context.Context, token string) (Identity, error) {
	claims := jwt.MapClaims{}
	_, err := j.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if kid, _ := t.Header["kid"].(string); kid == "" {
			return nil, errors.New("token has no kid")
		}
		return j.keys.KeyfuncCtx(ctx)(t)
	})
	if err != nil {
		return Identity{}, fmt.Errorf("agent jwt: %w: %w", ErrInvalidToken, err)
	}
	sub, _ := claims["sub"].(string)
	if instance, _ := claims["instance_id"].(string); instance != "" {
		if sub == "" {
			return Identity{}, fmt.Errorf("agent jwt: %w: sub is required with instance_id", ErrUnknownAgent)
		}
		return Identity{AgentID: sub, InstanceID: instance}, nil
	}
	claim := j.SessionClaim
	if claim == "" {
		claim = DefaultSessionClaim
	}
	session, _ := claims[claim].(string)
	if session == "" {
		return Identity{}, fmt.Errorf("agent jwt: %w: the token names no instance_id and no %s", ErrUnknownAgent, claim)
	}
	if j.Sessions != nil {
		if id, ok := j.Sessions.ResolveSession(ctx, session); ok {
			return id, nil
		}
	}
	return Identity{}, fmt.Errorf("agent jwt: %w: no agents_file entry has the token's session as its session_id", ErrUnknownAgent)
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
