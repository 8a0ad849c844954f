package nas_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/nas"
)

func TestAgentsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "agents.yaml")
	write := func(content string, mtime time.Time) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour)
	write("- agent_id: a\n  instance_id: ia\n  token_sha256: "+nas.TokenSHA256("tok-a")+"\n", base)
	f, err := nas.OpenAgentsFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := f.VerifyAgent(ctx, "tok-a")
	if err != nil || id != (nas.Identity{AgentID: "a", InstanceID: "ia"}) {
		t.Fatalf("verify: %+v %v", id, err)
	}
	if _, err := f.VerifyAgent(ctx, "tok-b"); !errors.Is(err, nas.ErrUnknownAgent) {
		t.Fatalf("unknown token: %v", err)
	}
	if _, err := f.VerifyAgent(ctx, ""); !errors.Is(err, nas.ErrInvalidToken) {
		t.Fatalf("empty token: %v", err)
	}
	// A changed file is picked up.
	write("- agent_id: b\n  instance_id: ib\n  token_sha256: "+nas.TokenSHA256("tok-b")+"\n", base.Add(time.Minute))
	if id, err := f.VerifyAgent(ctx, "tok-b"); err != nil || id.AgentID != "b" {
		t.Fatalf("after reload: %+v %v", id, err)
	}
	if _, err := f.VerifyAgent(ctx, "tok-a"); !errors.Is(err, nas.ErrUnknownAgent) {
		t.Fatal("a removed agent still verifies")
	}
	// A broken file keeps the previous agents.
	write("- agent_id: [", base.Add(2*time.Minute))
	if _, err := f.VerifyAgent(ctx, "tok-b"); err != nil {
		t.Fatalf("a broken file locked agents out: %v", err)
	}
}

func TestParseAgents(t *testing.T) {
	t.Parallel()
	h := nas.TokenSHA256("x")
	for name, in := range map[string]string{
		"missing instance": "- agent_id: a\n  token_sha256: " + h,
		"short hash":       "- agent_id: a\n  instance_id: i\n  token_sha256: abcd",
		"unknown key":      "- agent_id: a\n  instance_id: i\n  token_sha256: " + h + "\n  token: x",
		"hash twice":       "- {agent_id: a, instance_id: i, token_sha256: " + h + "}\n- {agent_id: b, instance_id: j, token_sha256: " + h + "}",
		"no credential":    "- agent_id: a\n  instance_id: i",
		"session twice":    "- {agent_id: a, instance_id: i, session_id: s-1}\n- {agent_id: b, instance_id: j, session_id: s-1}",
		"session space":    "- {agent_id: a, instance_id: i, session_id: 's 1'}",
		"session too long": "- {agent_id: a, instance_id: i, session_id: " + strings.Repeat("s", 513) + "}",
	} {
		if _, err := nas.ParseAgents([]byte(in)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if got, err := nas.ParseAgents(nil); err != nil || len(got) != 0 {
		t.Errorf("empty file: %v %v", got, err)
	}
	// A session alone, or beside a token hash, is an entry.
	got, err := nas.ParseAgents([]byte("- {agent_id: a, instance_id: i, session_id: sess-1}\n- {agent_id: b, instance_id: j, session_id: sess-2, token_sha256: " + strings.ToUpper(h) + "}"))
	if err != nil || len(got) != 2 || got[0].SessionID != "sess-1" || got[1].TokenSHA256 != h {
		t.Errorf("session entries: %+v %v", got, err)
	}
	if _, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i"}}); err == nil {
		t.Error("a static entry without a credential was accepted")
	}
}

// TestAgentsFileSessions: session ids resolve to their entry's agent and
// instance, follow the file when it changes, and never authenticate as an
// opaque token.
func TestAgentsFileSessions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agents.yaml")
	base := time.Now().Add(-time.Hour)
	write := func(content string, mtime time.Time) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("- {agent_id: hosted, instance_id: inst-h, session_id: sess-1}\n- {agent_id: self, instance_id: inst-s, token_sha256: "+nas.TokenSHA256("tok")+"}\n", base)
	f, err := nas.OpenAgentsFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if id, ok := f.ResolveSession(ctx, "sess-1"); !ok || id != (nas.Identity{AgentID: "hosted", InstanceID: "inst-h"}) {
		t.Fatalf("sess-1: %+v %v", id, ok)
	}
	if _, ok := f.ResolveSession(ctx, "sess-2"); ok {
		t.Fatal("an unknown session resolved")
	}
	if _, err := f.VerifyAgent(ctx, "sess-1"); !errors.Is(err, nas.ErrUnknownAgent) {
		t.Fatalf("a session id authenticated as an opaque token: %v", err)
	}
	if id, err := f.VerifyAgent(ctx, "tok"); err != nil || id.AgentID != "self" {
		t.Fatalf("opaque token beside sessions: %+v %v", id, err)
	}
	write("- {agent_id: hosted, instance_id: inst-h2, session_id: sess-2}\n", base.Add(time.Minute))
	if _, ok := f.ResolveSession(ctx, "sess-1"); ok {
		t.Fatal("a removed session still resolves")
	}
	if id, ok := f.ResolveSession(ctx, "sess-2"); !ok || id.InstanceID != "inst-h2" {
		t.Fatalf("after reload: %+v %v", id, ok)
	}
}

// TestJWTAgents checks access tokens against an issuer's JWKS served over HTTP.
func TestJWTAgents(t *testing.T) {
	t.Parallel()
	ring, err := nas.NewEphemeralKeyRing(nas.AlgES256)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(ring.Current().JWKS())
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := nas.NewJWTAgents(ctx, "https://issuer.test", "chronos-nas", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for v.Ready(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("keys never loaded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	key := ring.Current().Active
	now := time.Now()
	sign := func(edit func(h map[string]any, c jwt.MapClaims)) string {
		c := jwt.MapClaims{"iss": "https://issuer.test", "aud": "chronos-nas", "sub": "agent-1", "instance_id": "inst-1",
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		tok := jwt.NewWithClaims(key.SigningMethod(), c)
		tok.Header["kid"] = key.KID
		edit(tok.Header, c)
		s, err := tok.SignedString(key.Private)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	id, err := v.VerifyAgent(ctx, sign(func(map[string]any, jwt.MapClaims) {}))
	if err != nil || id != (nas.Identity{AgentID: "agent-1", InstanceID: "inst-1"}) {
		t.Fatalf("good token: %+v %v", id, err)
	}
	bad := map[string]func(h map[string]any, c jwt.MapClaims){
		"iss":     func(_ map[string]any, c jwt.MapClaims) { c["iss"] = "https://other.test" },
		"aud":     func(_ map[string]any, c jwt.MapClaims) { c["aud"] = "someone-else" },
		"expired": func(_ map[string]any, c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() },
		"no exp":  func(_ map[string]any, c jwt.MapClaims) { delete(c, "exp") },
		"no kid":  func(h map[string]any, _ jwt.MapClaims) { delete(h, "kid") },
	}
	for name, edit := range bad {
		if _, err := v.VerifyAgent(ctx, sign(edit)); !errors.Is(err, nas.ErrInvalidToken) {
			t.Errorf("%s: %v, want ErrInvalidToken", name, err)
		}
	}
	if _, err := v.VerifyAgent(ctx, sign(func(_ map[string]any, c jwt.MapClaims) { delete(c, "instance_id") })); !errors.Is(err, nas.ErrUnknownAgent) {
		t.Errorf("no instance_id: %v", err)
	}
	// An HMAC token signed with the public key bytes is refused (methods pinned).
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "https://issuer.test", "aud": "chronos-nas", "sub": "x", "instance_id": "y", "exp": now.Add(time.Hour).Unix()})
	hs.Header["kid"] = key.KID
	s, _ := hs.SignedString([]byte("secret"))
	if _, err := v.VerifyAgent(ctx, s); !errors.Is(err, nas.ErrInvalidToken) {
		t.Errorf("HS256: %v", err)
	}
	// MultiVerifier routes JWT-shaped tokens to the JWT verifier.
	opaque, _ := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "o", InstanceID: "oi", TokenSHA256: nas.TokenSHA256("opaque")}})
	m := nas.MultiVerifier{Opaque: opaque, JWT: v}
	if id, err := m.VerifyAgent(ctx, "opaque"); err != nil || id.AgentID != "o" {
		t.Errorf("multi opaque: %+v %v", id, err)
	}
	if id, err := m.VerifyAgent(ctx, sign(func(map[string]any, jwt.MapClaims) {})); err != nil || id.AgentID != "agent-1" {
		t.Errorf("multi jwt: %+v %v", id, err)
	}
}
