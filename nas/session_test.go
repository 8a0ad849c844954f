package nas_test

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

	"github.com/chronoscron/chronos/nas"
)

// testIssuer is an identity provider: an RSA key whose public half it serves
// as a JWKS over HTTP, and that signs RS256 access tokens.
type testIssuer struct {
	key  *rsa.PrivateKey
	kid  string
	jwks *httptest.Server
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss := &testIssuer{key: key, kid: "issuer-key-1"}
	body, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": iss.kid, "use": "sig", "alg": "RS256",
		"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	iss.jwks = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(iss.jwks.Close)
	return iss
}

// sign returns an RS256 token with claims, signed by key (the issuer's when nil).
func (i *testIssuer) sign(t *testing.T, claims jwt.MapClaims, key *rsa.PrivateKey) string {
	t.Helper()
	if key == nil {
		key = i.key
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = i.kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hostedClaims are the claims of a hosted agent's access token: the user,
// the bootstrap session and the client, and no instance claim.
func hostedClaims(sid string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": "https://portal.test", "aud": "chronos-nas", "sub": "user-42", "sid": sid, "client_id": "hermes-cli",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

// TestJWTAgentsSessions: a verified token without an instance claim whose
// `sid` is an agents-file entry's session_id authenticates as that entry; a
// session no entry has is ErrUnknownAgent (403 invalid_client); a token
// that names its instance keeps working; the session changes nothing about
// how the token itself is verified.
func TestJWTAgentsSessions(t *testing.T) {
	t.Parallel()
	iss := newTestIssuer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := nas.NewJWTAgents(ctx, "https://portal.test", "chronos-nas", iss.jwks.URL)
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := nas.NewStaticAgents([]nas.AgentEntry{
		{AgentID: "hermes-1", InstanceID: "inst-h1", SessionID: "sess-abc"},
		{AgentID: "hermes-2", InstanceID: "inst-h2", SessionID: "sess-def", TokenSHA256: nas.TokenSHA256("opaque")},
	})
	if err != nil {
		t.Fatal(err)
	}
	v.Sessions = sessions
	deadline := time.Now().Add(5 * time.Second)
	for v.Ready(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the issuer's keys never loaded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(sid string, f func(c jwt.MapClaims)) jwt.MapClaims {
		c := hostedClaims(sid)
		f(c)
		return c
	}
	tests := []struct {
		name    string
		token   string
		want    nas.Identity
		wantErr error
	}{
		{name: "mapped session", token: iss.sign(t, hostedClaims("sess-abc"), nil), want: nas.Identity{AgentID: "hermes-1", InstanceID: "inst-h1"}},
		{name: "session beside a token hash", token: iss.sign(t, hostedClaims("sess-def"), nil), want: nas.Identity{AgentID: "hermes-2", InstanceID: "inst-h2"}},
		{name: "instance named directly wins", token: iss.sign(t, edit("sess-abc", func(c jwt.MapClaims) { c["sub"], c["instance_id"] = "agent-x", "inst-x" }), nil),
			want: nas.Identity{AgentID: "agent-x", InstanceID: "inst-x"}},
		{name: "unknown session", token: iss.sign(t, hostedClaims("sess-zzz"), nil), wantErr: nas.ErrUnknownAgent},
		{name: "no session, no instance", token: iss.sign(t, edit("", func(c jwt.MapClaims) { delete(c, "sid") }), nil), wantErr: nas.ErrUnknownAgent},
		{name: "session of another type", token: iss.sign(t, edit("", func(c jwt.MapClaims) { c["sid"] = 7 }), nil), wantErr: nas.ErrUnknownAgent},
		{name: "known session, foreign signature", token: iss.sign(t, hostedClaims("sess-abc"), other), wantErr: nas.ErrInvalidToken},
		{name: "known session, expired", token: iss.sign(t, edit("sess-abc", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }), nil), wantErr: nas.ErrInvalidToken},
		{name: "known session, wrong audience", token: iss.sign(t, edit("sess-abc", func(c jwt.MapClaims) { c["aud"] = "someone-else" }), nil), wantErr: nas.ErrInvalidToken},
		{name: "known session, wrong issuer", token: iss.sign(t, edit("sess-abc", func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }), nil), wantErr: nas.ErrInvalidToken},
	}
	for _, tt := range tests {
		id, err := v.VerifyAgent(ctx, tt.token)
		switch {
		case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
			t.Errorf("%s: %+v %v, want %v", tt.name, id, err, tt.wantErr)
		case tt.wantErr == nil && (err != nil || id != tt.want):
			t.Errorf("%s: %+v %v, want %+v", tt.name, id, err, tt.want)
		}
	}

	// agent_jwt.session_claim names another claim.
	v.SessionClaim = "session"
	if id, err := v.VerifyAgent(ctx, iss.sign(t, edit("", func(c jwt.MapClaims) { delete(c, "sid"); c["session"] = "sess-abc" }), nil)); err != nil || id.InstanceID != "inst-h1" {
		t.Errorf("custom session claim: %+v %v", id, err)
	}
	if _, err := v.VerifyAgent(ctx, iss.sign(t, hostedClaims("sess-abc"), nil)); !errors.Is(err, nas.ErrUnknownAgent) {
		t.Errorf("sid used although session_claim names another claim: %v", err)
	}

	// Without an agents file nothing maps.
	v.SessionClaim, v.Sessions = "", nil
	if _, err := v.VerifyAgent(ctx, iss.sign(t, hostedClaims("sess-abc"), nil)); !errors.Is(err, nas.ErrUnknownAgent) {
		t.Errorf("a session mapped without sessions: %v", err)
	}
}
