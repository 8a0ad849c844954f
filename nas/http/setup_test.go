package nashttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// Test identities: two agents with opaque tokens.
const (
	tokenA    = "token-of-agent-a"
	tokenB    = "token-of-agent-b"
	agentA    = "agent-a"
	agentB    = "agent-b"
	instanceA = "inst-a"
	instanceB = "inst-b"
	opToken   = "operator-secret-token"
	publicURL = "https://nas.test"
)

var relaySecret = contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))

// bundle is what setup returns: a service on the embedded engine, its
// handlers wrapped by the contract checker, and a fake agent.
type bundle struct {
	t        *testing.T
	engine   *memory.Engine
	svc      *nas.Service
	srv      *nashttp.Server
	public   *apitest.Handler
	internal *apitest.Handler
	agent    *fakeAgent
	secret   []byte
}

type setupOpt func(*nas.Config, *nas.Options)

func setup(t *testing.T, opts ...setupOpt) *bundle {
	t.Helper()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	key, err := nas.GenerateKey(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	set, err := nas.NewKeySet([]*nas.SigningKey{key}, "", nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{
		{AgentID: agentA, InstanceID: instanceA, TokenSHA256: nas.TokenSHA256(tokenA)},
		{AgentID: agentB, InstanceID: instanceB, TokenSHA256: nas.TokenSHA256(tokenB)},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := nas.Config{
		PublicURL:             publicURL,
		Relay:                 nas.RelayConfig{Secrets: []string{relaySecret}},
		AllowPrivateCallbacks: true,
		OperatorToken:         opToken,
		DeliveryTimeout:       2 * time.Second,
	}
	o := nas.Options{Engine: eng, Verifier: agents, Keys: nas.NewKeyRing(set), Logger: slog.New(slog.DiscardHandler)}
	for _, f := range opts {
		f(&cfg, &o)
	}
	if m, ok := o.Engine.(*memory.Engine); ok {
		eng = m // an option gave the service an engine of its own
	}
	o.Config = cfg
	svc, err := nas.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	srv := nashttp.NewServer(svc, nashttp.Options{Split: cfg.RelayListen != "", Logger: o.Logger})
	secret, _ := contract.ParseWebhookSecret(relaySecret)
	b := &bundle{
		t: t, engine: eng, svc: svc, srv: srv, secret: secret,
		public:   apitest.New(t, srv.Handler()),
		internal: apitest.New(t, srv.InternalHandler()),
		agent:    newFakeAgent(t, svc.JWKS()),
	}
	return b
}

// request is one call in a table.
type request struct {
	method, path, token string
	body                any // string is sent as is, []byte too, anything else as JSON
	header              map[string]string
	invalid             bool   // the request deliberately breaks the description
	chunked             bool   // send the body with no Content-Length, as a chunked upload
	remote              string // the client's address; default 127.0.0.1:40000
}

func (b *bundle) do(h http.Handler, r request) *httptest.ResponseRecorder {
	b.t.Helper()
	var body io.Reader
	switch v := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(v)
	case []byte:
		body = bytes.NewReader(v)
	default:
		data, err := json.Marshal(v)
		if err != nil {
			b.t.Fatal(err)
		}
		body = bytes.NewReader(data)
	}
	req := httptest.NewRequest(r.method, r.path, body)
	// A client on NAS's own host, as NAS's dispatchers and its operator
	// there are: without relay_listen the internal routes answer no other.
	req.RemoteAddr = "127.0.0.1:40000"
	if r.remote != "" {
		req.RemoteAddr = r.remote
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	if r.chunked {
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
	}
	if r.invalid {
		req = apitest.ExpectInvalid(req)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// errCode returns the `error` of an error body.
func errCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var e contract.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("body %q is not an error body: %v", rec.Body.String(), err)
	}
	return e.Code
}

func decodeBody[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decoding %q: %v", rec.Body.String(), err)
	}
	return v
}

// provisionBody returns a valid provision body for job at fireAt.
func (b *bundle) provisionBody(job string, fireAt time.Time) contract.ProvisionRequest {
	fa := fireAt.UTC().Format(time.RFC3339Nano)
	return contract.ProvisionRequest{JobID: job, FireAt: contract.NewTime(fireAt), AgentCallbackURL: b.agent.URL(), DedupKey: job + ":" + fa}
}

func (b *bundle) provision(token, job string, fireAt time.Time) contract.ProvisionResponse {
	b.t.Helper()
	rec := b.do(b.public, request{method: http.MethodPost, path: contract.PathProvision, token: token, body: b.provisionBody(job, fireAt)})
	if rec.Code != http.StatusOK {
		b.t.Fatalf("provision %s: %d %s", job, rec.Code, rec.Body)
	}
	return decodeBody[contract.ProvisionResponse](b.t, rec)
}

// signedRelay returns a relay request signed with the test secret at ts.
func (b *bundle) signedRelay(id string, ts time.Time, body []byte) request {
	h := contract.WebhookHeaders([][]byte{b.secret}, id, ts, body)
	return request{method: http.MethodPost, path: contract.PathRelay, body: body, header: h}
}

func relayBody(t testing.TB, agentID, job, scheduleID string, fireAt time.Time, attempt int) []byte {
	t.Helper()
	data, err := json.Marshal(contract.RelayRequest{ScheduleID: scheduleID, AgentID: agentID, JobID: job, FireAt: contract.NewTime(fireAt), Attempt: attempt})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// fakeAgent is an agent's fire endpoint that verifies tokens against NAS's
// JWKS exactly as an agent would, and answers as told per job.
type fakeAgent struct {
	t      *testing.T
	srv    *httptest.Server
	verify func(token string, body []byte) (*contract.FireClaims, error)

	mu      sync.Mutex
	answers map[string]func(w http.ResponseWriter) // by job id; default 202 accepted
	fires   []receivedFire
	bad     []string
	notify  chan receivedFire
}

type receivedFire struct {
	Body   contract.FireRequest
	Claims *contract.FireClaims
	At     time.Time
}

func newFakeAgent(t *testing.T, jwks []byte) *fakeAgent {
	kf, err := keyfunc.NewJWKSetJSON(jwks)
	if err != nil {
		t.Fatal(err)
	}
	return newFakeAgentVerifying(t, func(token string, body []byte) (*contract.FireClaims, error) {
		return verifyFireToken(kf.Keyfunc, token, body, publicURL, "")
	})
}

// newFakeAgentVerifying starts a fake agent that checks tokens with verify.
func newFakeAgentVerifying(t *testing.T, verify func(token string, body []byte) (*contract.FireClaims, error)) *fakeAgent {
	a := &fakeAgent{t: t, answers: map[string]func(http.ResponseWriter){}, notify: make(chan receivedFire, 1000), verify: verify}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAgent) URL() string { return a.srv.URL }

func (a *fakeAgent) answer(job string, f func(w http.ResponseWriter)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answers[job] = f
}

func (a *fakeAgent) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	if r.URL.Path != contract.PathFire || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	claims, err := a.verify(tok, body)
	if err != nil {
		a.mu.Lock()
		a.bad = append(a.bad, err.Error())
		a.mu.Unlock()
		contract.WriteError(w, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "%v", err))
		return
	}
	var fr contract.FireRequest
	if e := contract.DecodeBytes(body, &fr); e != nil {
		contract.WriteError(w, e)
		return
	}
	a.mu.Lock()
	f := a.answers[fr.JobID]
	rf := receivedFire{Body: fr, Claims: claims, At: at}
	a.fires = append(a.fires, rf)
	a.mu.Unlock()
	a.notify <- rf
	if f != nil {
		f(w)
		return
	}
	contract.WriteJSON(w, http.StatusAccepted, contract.FireResponse{Status: contract.FireAccepted, JobID: fr.JobID, RunID: "run-" + fr.ScheduleID})
}

func (a *fakeAgent) received() []receivedFire {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]receivedFire(nil), a.fires...)
}

func (a *fakeAgent) rejected() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.bad...)
}

// verifyFireToken checks a cron_fire token the way DESIGN.md tells agents to:
// signature via JWKS with the algorithm pinned, kid and typ required, exp and
// iat required with at most 120 s between them, aud the single expected
// value (any agent:… when instance is ""), iss, purpose, and bh and job_id
// matching the body.
func verifyFireToken(kf jwt.Keyfunc, token string, body []byte, issuer, instance string) (*contract.FireClaims, error) {
	var c contract.FireClaims
	p := jwt.NewParser(jwt.WithValidMethods([]string{"EdDSA", "ES256", "RS256"}), jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), jwt.WithIssuer(issuer), jwt.WithLeeway(30*time.Second))
	tok, err := p.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		if kid, _ := t.Header["kid"].(string); kid == "" {
			return nil, errors.New("no kid")
		}
		if typ, _ := t.Header["typ"].(string); typ != contract.TokenTypeCronFire {
			return nil, fmt.Errorf("typ %q", typ)
		}
		return kf(t)
	})
	if err != nil || !tok.Valid {
		return nil, fmt.Errorf("token: %w", err)
	}
	switch {
	case c.Purpose != contract.PurposeCronFire:
		return nil, errors.New("purpose")
	case instance != "" && c.Audience != contract.Audience(instance):
		return nil, errors.New("aud")
	case !strings.HasPrefix(c.Audience, contract.AudiencePrefix):
		return nil, errors.New("aud prefix")
	case c.ExpiresAt.Sub(c.IssuedAt.Time) > contract.MaxFireTokenLifetimeSeconds*time.Second:
		return nil, errors.New("lifetime")
	case c.ID == "":
		return nil, errors.New("jti")
	case c.BodyHash != contract.BodyHash(body):
		return nil, errors.New("bh")
	}
	var fr contract.FireRequest
	if err := json.Unmarshal(body, &fr); err != nil || fr.JobID != c.JobID || fr.ScheduleID != c.ScheduleID || fr.Attempt != c.Attempt {
		return nil, errors.New("body does not match claims")
	}
	return &c, nil
}

// brokenEngine fails every armed-row call, for the 500 paths.
type brokenEngine struct{ relay.Engine }

var errBroken = errors.New("store down")

func (brokenEngine) Arm(context.Context, relay.ArmRequest) (relay.ArmResult, error) {
	return relay.ArmResult{}, errBroken
}
func (brokenEngine) Cancel(context.Context, string, string) (bool, error) { return false, errBroken }
func (brokenEngine) List(context.Context, string, string, int) ([]relay.OneShot, string, error) {
	return nil, "", errBroken
}
func (brokenEngine) Get(context.Context, string, string) (relay.OneShot, error) {
	return relay.OneShot{}, errBroken
}
func (brokenEngine) CancelAgent(context.Context, string) (int, error) { return 0, errBroken }
func (brokenEngine) ListDead(context.Context, string, string, int) ([]relay.DeadLetter, string, error) {
	return nil, "", errBroken
}
func (brokenEngine) Replay(context.Context, []string) (relay.ReplayResult, error) {
	return relay.ReplayResult{}, errBroken
}
func (brokenEngine) ListFailed(context.Context, string, time.Duration, int) ([]relay.DeadLetter, error) {
	return nil, errBroken
}
func (brokenEngine) AckFailed(context.Context, string, time.Duration, []string) (int, error) {
	return 0, errBroken
}
func (brokenEngine) SetInstanceState(context.Context, string, relay.InstanceState) error {
	return errBroken
}
func (brokenEngine) Stats(context.Context) (relay.Stats, error) { return relay.Stats{}, errBroken }

func withBrokenEngine(cfg *nas.Config, o *nas.Options) { o.Engine = brokenEngine{o.Engine} }

func armRequest(b *bundle, job string, fireAt time.Time) relay.ArmRequest {
	return relay.ArmRequest{AgentID: agentA, InstanceID: instanceA, JobID: job, FireAt: fireAt,
		CallbackURL: b.agent.URL(), ScheduleID: fmt.Sprintf("sch-%s-%d", job, fireAt.UnixNano())}
}
