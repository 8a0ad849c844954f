package nashttp_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
)

// portal is a hosted agents' identity provider: it serves an RSA JWKS over
// HTTP and signs RS256 access tokens shaped like a hosted agent's (`sub` the
// user, `sid` the session, `client_id`, no instance claim).
type portal struct {
	key  *rsa.PrivateKey
	jwks *httptest.Server
}

const (
	portalIssuer   = "https://portal.test"
	portalAudience = "chronos-nas"
)

func newPortal(t *testing.T) *portal {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": "portal-1", "use": "sig", "alg": "RS256",
		"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &portal{key: key}
	p.jwks = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(p.jwks.Close)
	return p
}

// token returns a hosted agent's access token for session sid.
func (p *portal) token(t *testing.T, sid string) string {
	t.Helper()
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": portalIssuer, "aud": portalAudience, "sub": "user-42", "sid": sid, "client_id": "hermes-cli",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	tok.Header["kid"] = "portal-1"
	s, err := tok.SignedString(p.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// withPortal makes NAS accept the portal's tokens, mapping session sess-1 to
// agent hosted-1 / instance inst-hosted-1, beside the opaque test agents.
func withPortal(t *testing.T, p *portal) setupOpt {
	return func(_ *nas.Config, o *nas.Options) {
		agents, err := nas.NewStaticAgents([]nas.AgentEntry{
			{AgentID: agentA, InstanceID: instanceA, TokenSHA256: nas.TokenSHA256(tokenA)},
			{AgentID: "hosted-1", InstanceID: "inst-hosted-1", SessionID: "sess-1"},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		j, err := nas.NewJWTAgents(ctx, portalIssuer, portalAudience, p.jwks.URL)
		if err != nil {
			t.Fatal(err)
		}
		j.Sessions = agents
		deadline := time.Now().Add(5 * time.Second)
		for j.Ready(ctx) != nil {
			if time.Now().After(deadline) {
				t.Fatal("the portal's keys never loaded")
			}
			time.Sleep(5 * time.Millisecond)
		}
		o.Verifier = nas.MultiVerifier{Opaque: agents, JWT: j}
	}
}

// TestNASHostedAgentSession: a hosted agent's access token, mapped by its
// session to an agents-file entry, arms jobs under that entry's agent, and
// the fire of such a job carries aud agent:{instance_id} of the entry. A
// token whose session maps to no entry is 403 invalid_client and arms
// nothing; a token NAS cannot verify is 401.
func TestNASHostedAgentSession(t *testing.T) {
	t.Parallel()
	p := newPortal(t)
	b := setup(t, withPortal(t, p))
	ctx := context.Background()

	resp := b.provision(p.token(t, "sess-1"), "nightly", time.Now().Add(time.Hour))
	row, err := b.engine.Get(ctx, "hosted-1", "nightly")
	if err != nil || row.InstanceID != "inst-hosted-1" || row.ScheduleID != resp.ScheduleID {
		t.Fatalf("armed row %+v %v, want job nightly of hosted-1 on inst-hosted-1", row, err)
	}
	if _, err := b.engine.Get(ctx, "user-42", "nightly"); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("the job was armed under the token's sub: %v", err)
	}

	// The fire: re-armed due now through the engine (the API refuses a past
	// fire_at), delivered through the relay route.
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	res, err := b.engine.Arm(ctx, relay.ArmRequest{AgentID: "hosted-1", InstanceID: "inst-hosted-1", JobID: "nightly",
		FireAt: fireAt, CallbackURL: b.agent.URL(), ScheduleID: "sch-hosted"})
	if err != nil {
		t.Fatal(err)
	}
	rec := b.do(b.internal, b.signedRelay("d-hosted", time.Now(), relayBody(t, "hosted-1", "nightly", res.OneShot.ScheduleID, fireAt, 1)))
	if got := decodeBody[contract.RelayResponse](t, rec); rec.Code != 200 || got.Status != contract.RelayDelivered {
		t.Fatalf("relay: %d %+v", rec.Code, got)
	}
	f := waitFire(t, b.agent, 5*time.Second)
	if f.Claims.Audience != "agent:inst-hosted-1" || f.Body.JobID != "nightly" {
		t.Fatalf("fire aud %q job %q, want agent:inst-hosted-1 nightly", f.Claims.Audience, f.Body.JobID)
	}

	// A verified token whose session maps to no entry, and one NAS cannot
	// verify, arm nothing.
	for _, tc := range []struct {
		name, token string
		status      int
		code        string
	}{
		{"unknown session", p.token(t, "sess-unknown"), http.StatusForbidden, contract.CodeInvalidClient},
		{"another portal's key", newPortal(t).token(t, "sess-1"), http.StatusUnauthorized, contract.CodeInvalidToken},
	} {
		rec := b.do(b.public, request{method: http.MethodPost, path: contract.PathProvision, token: tc.token, body: b.provisionBody("other", time.Now().Add(time.Hour))})
		if rec.Code != tc.status || errCode(t, rec) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, rec.Code, rec.Body, tc.status, tc.code)
		}
	}
	if _, err := b.engine.Get(ctx, "hosted-1", "other"); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("a refused token armed a job: %v", err)
	}
	// The opaque agent beside it is unaffected.
	b.provision(tokenA, "job-a", time.Now().Add(time.Hour))
}
