package nas_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

func TestMintClaims(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgs {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			testMintClaims(t, alg)
		})
	}
}

func testMintClaims(t *testing.T, alg string) {
	ring, err := nas.NewEphemeralKeyRing(alg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 6, 18, 12, 34, 56, 700_000_000, time.UTC)
	fire := contract.FireRequest{JobID: "job", FireAt: contract.NewTime(now.Add(-time.Second)), ScheduleID: "sch", Attempt: 2}
	body, _ := json.Marshal(fire)
	m := &nas.Minter{Keys: ring, Issuer: "https://nas.test", TTL: 90 * time.Second}
	a, err := m.Mint(now, nas.FireToken{InstanceID: "inst", Fire: fire, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Mint(now, nas.FireToken{InstanceID: "inst", Fire: fire, Body: body})
	var c, d contract.FireClaims
	tok, _, err := jwt.NewParser().ParseUnverified(a, &c)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = jwt.NewParser().ParseUnverified(b, &d)
	if tok.Header["typ"] != contract.TokenTypeCronFire || tok.Header["kid"] != ring.Current().Active.KID || tok.Header["alg"] != alg {
		t.Fatalf("header %v", tok.Header)
	}
	want := contract.FireClaims{TokenClaims: contract.TokenClaims{Issuer: "https://nas.test", Audience: "agent:inst", Purpose: "cron_fire"}, JobID: "job",
		FireAt: "2026-06-18T12:34:55.7Z", ScheduleID: "sch", Attempt: 2, BodyHash: contract.BodyHash(body)}
	got := c
	got.IssuedAt, got.NotBefore, got.ExpiresAt, got.ID = nil, nil, nil, ""
	if got != want {
		t.Fatalf("claims\n got %+v\nwant %+v", got, want)
	}
	if c.IssuedAt.Unix() != now.Unix() || c.NotBefore.Unix() != now.Unix() || c.ExpiresAt.Unix() != now.Unix()+90 {
		t.Fatalf("times iat %v nbf %v exp %v", c.IssuedAt, c.NotBefore, c.ExpiresAt)
	}
	if c.ID == "" || c.ID == d.ID {
		t.Fatalf("jti %q %q not unique", c.ID, d.ID)
	}
	// The aud is a single string on the wire, not an array.
	parts := jwt.MapClaims{}
	_, _, _ = jwt.NewParser().ParseUnverified(a, parts)
	if _, isString := parts["aud"].(string); !isString {
		t.Fatalf("aud is %T", parts["aud"])
	}
}

// TestMintedTokensMeetTheAgentVerifier runs NAS's tokens through the agent
// library's verifier: the real token passes, and a token with any one claim
// or header wrong (re-signed with NAS's own key) is refused.
func TestMintedTokensMeetTheAgentVerifier(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgs {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			ring, err := nas.NewEphemeralKeyRing(alg)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			fire := contract.FireRequest{JobID: "job", FireAt: contract.NewTime(now.Truncate(time.Second)), ScheduleID: "sch", Attempt: 1}
			body, _ := json.Marshal(fire)
			m := &nas.Minter{Keys: ring, Issuer: "https://nas.test", TTL: 90 * time.Second}
			good, err := m.Mint(now, nas.FireToken{InstanceID: "inst", Fire: fire, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			v, err := fireauth.NewStatic(ring.Current().JWKS(), fireauth.Config{Issuer: "https://nas.test", Audience: "agent:inst", Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := v.VerifyFire(ctx, good, body, fire); err != nil {
				t.Fatalf("NAS's token refused: %v", err)
			}
			key := ring.Current().Active
			resign := func(edit func(h map[string]any, c jwt.MapClaims)) string {
				c := jwt.MapClaims{}
				tok, _, err := jwt.NewParser().ParseUnverified(good, c)
				if err != nil {
					t.Fatal(err)
				}
				nt := jwt.NewWithClaims(key.SigningMethod(), c)
				for k, v := range tok.Header {
					nt.Header[k] = v
				}
				edit(nt.Header, c)
				s, err := nt.SignedString(key.Private)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			cases := map[string]func(h map[string]any, c jwt.MapClaims){
				"iss":         func(_ map[string]any, c jwt.MapClaims) { c["iss"] = "https://evil.test" },
				"aud":         func(_ map[string]any, c jwt.MapClaims) { c["aud"] = "agent:other" },
				"aud array":   func(_ map[string]any, c jwt.MapClaims) { c["aud"] = []string{"agent:inst", "agent:other"} },
				"purpose":     func(_ map[string]any, c jwt.MapClaims) { c["purpose"] = "login" },
				"expired":     func(_ map[string]any, c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() },
				"no exp":      func(_ map[string]any, c jwt.MapClaims) { delete(c, "exp") },
				"long life":   func(_ map[string]any, c jwt.MapClaims) { c["exp"] = now.Add(10 * time.Minute).Unix() },
				"future nbf":  func(_ map[string]any, c jwt.MapClaims) { c["nbf"] = now.Add(5 * time.Minute).Unix() },
				"job_id":      func(_ map[string]any, c jwt.MapClaims) { c["job_id"] = "other" },
				"schedule_id": func(_ map[string]any, c jwt.MapClaims) { c["schedule_id"] = "other" },
				"attempt":     func(_ map[string]any, c jwt.MapClaims) { c["attempt"] = 9 },
				"bh":          func(_ map[string]any, c jwt.MapClaims) { c["bh"] = contract.BodyHash([]byte("{}")) },
				"typ":         func(h map[string]any, _ jwt.MapClaims) { h["typ"] = "JWT" },
				"no kid":      func(h map[string]any, _ jwt.MapClaims) { delete(h, "kid") },
				"unknown kid": func(h map[string]any, _ jwt.MapClaims) { h["kid"] = "nope" },
			}
			for name, edit := range cases {
				if err := v.VerifyFire(ctx, resign(edit), body, fire); err == nil {
					t.Errorf("a token with a wrong %s was accepted", name)
				}
			}
			// And the good token does not fire another body.
			other := contract.FireRequest{JobID: "other", FireAt: fire.FireAt, ScheduleID: "sch", Attempt: 1}
			otherBody, _ := json.Marshal(other)
			if err := v.VerifyFire(ctx, good, otherBody, other); err == nil {
				t.Error("a captured token fired another job")
			}
		})
	}
}

// TestMintIsGolangJWTByteForByte: the hand-built tokens (EdDSA and ES256)
// have the header and claims segments golang-jwt writes for the same claims,
// and signatures it verifies with the public key.
func TestMintIsGolangJWTByteForByte(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{nas.AlgEdDSA, nas.AlgES256} {
		t.Run(alg, func(t *testing.T) {
			ring, err := nas.NewEphemeralKeyRing(alg)
			if err != nil {
				t.Fatal(err)
			}
			spelled := contract.NewTimeSpelled(time.Date(2026, 12, 1, 7, 0, 0, 500_000_000, time.UTC), "2026-12-01T09:00:00.5+02:00")
			fires := []struct {
				instance string
				fire     contract.FireRequest
			}{
				{"inst", contract.FireRequest{JobID: "job<&>", FireAt: contract.NewTime(time.Now()), ScheduleID: "sch-\u00e9", Attempt: 3}},
				{"in\"st<\u00e9>", contract.FireRequest{JobID: "job", FireAt: spelled, ScheduleID: "sch", Attempt: 1}},
				{"inst", contract.FireRequest{JobID: "job\n\u2028", FireAt: contract.NewTime(time.Unix(1, 0)), ScheduleID: "sch", Attempt: 1 << 40}},
			}
			m := &nas.Minter{Keys: ring, Issuer: "https://nas.test/é", TTL: 90 * time.Second}
			for i := range 30 { // ES256 signatures vary in length before padding
				fire := fires[i%len(fires)]
				body, _ := json.Marshal(fire.fire)
				tok, err := m.Mint(time.Now(), nas.FireToken{InstanceID: fire.instance, Fire: fire.fire, Body: body})
				if err != nil {
					t.Fatal(err)
				}
				key := ring.Current().Active
				var claims contract.FireClaims
				parsed, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return key.Private.Public(), nil },
					jwt.WithValidMethods([]string{alg}))
				if err != nil || !parsed.Valid {
					t.Fatalf("golang-jwt refuses the token: %v", err)
				}
				want := jwt.NewWithClaims(key.SigningMethod(), &claims)
				want.Header["kid"] = key.KID
				want.Header["typ"] = contract.TokenTypeCronFire
				input, err := want.SigningString()
				if err != nil {
					t.Fatal(err)
				}
				if got := tok[:strings.LastIndexByte(tok, '.')]; got != input {
					t.Fatalf("signing input\n got  %s\n want %s", got, input)
				}
				if claims.Audience != contract.Audience(fire.instance) || claims.FireAt != fire.fire.FireAt.Text() || claims.BodyHash != contract.BodyHash(body) {
					t.Fatalf("claims %+v for %+v", claims, fire)
				}
			}
		})
	}
}

// TestMintFollowsKeyRotation: one Minter signs with whichever key is
// active, with that key's kid and algorithm in the header, across reloads
// of its key ring (also back to a key that signed before).
func TestMintFollowsKeyRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	first := writeKey(t, dir, nas.AlgES256, base)
	second := writeKey(t, dir, nas.AlgES256, base.Add(time.Minute))
	ring, err := nas.OpenKeyRing(dir, nas.AlgES256)
	if err != nil {
		t.Fatal(err)
	}
	m := &nas.Minter{Keys: ring, Issuer: "https://nas.test", TTL: 90 * time.Second}
	fire := contract.FireRequest{JobID: "j", FireAt: contract.NewTime(time.Now()), ScheduleID: "s", Attempt: 1}
	body, _ := json.Marshal(fire)
	for i, want := range []*nas.SigningKey{first, second, first, second} {
		if i > 0 {
			if err := os.WriteFile(filepath.Join(dir, nas.ActiveKeyFile), []byte(want.KID+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			// A new stamp for the directory even within the clock's grain.
			mt := base.Add(time.Duration(i) * time.Hour)
			if err := os.Chtimes(filepath.Join(dir, nas.ActiveKeyFile), mt, mt); err != nil {
				t.Fatal(err)
			}
			if changed, err := ring.Reload(); err != nil || !changed {
				t.Fatalf("step %d: reload %v %v", i, changed, err)
			}
		}
		tok, err := m.Mint(time.Now(), nas.FireToken{InstanceID: "i", Fire: fire, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if kid := kidOf(t, tok); kid != want.KID {
			t.Fatalf("step %d: signed with kid %s, want %s", i, kid, want.KID)
		}
		if _, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return want.Private.Public(), nil }, jwt.WithValidMethods([]string{nas.AlgES256})); err != nil {
			t.Fatalf("step %d: the token does not verify with the active key: %v", i, err)
		}
	}
}

// BenchmarkMint measures minting one fire token per algorithm.
func BenchmarkMint(b *testing.B) {
	for _, alg := range allAlgs {
		b.Run(alg, func(b *testing.B) {
			ring, err := nas.NewEphemeralKeyRing(alg)
			if err != nil {
				b.Fatal(err)
			}
			m := &nas.Minter{Keys: ring, Issuer: "https://nas.test", TTL: 90 * time.Second}
			fire := contract.FireRequest{JobID: "job", FireAt: contract.NewTime(time.Now()), ScheduleID: "sch", Attempt: 1}
			body, _ := json.Marshal(fire)
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Mint(now, nas.FireToken{InstanceID: "inst", Fire: fire, Body: body}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// capturingCaller records the token of each fire and answers 202.
type capturingCaller struct{ tokens chan string }

func (c capturingCaller) Fire(_ context.Context, _, token string, _ []byte) agentcall.FireResult {
	c.tokens <- token
	return agentcall.FireResult{Outcome: agentcall.OutcomeDelivered, HTTPStatus: 202}
}

// TestFireTokenIssuerIsPublicURL pins that `iss` is public_url exactly as
// configured, so an agent whose portal_url is the same string accepts it,
// trailing slash or not.
func TestFireTokenIssuerIsPublicURL(t *testing.T) {
	t.Parallel()
	for _, publicURL := range []string{"https://nas.example.com", "https://nas.example.com/", "https://example.com/nas/"} {
		t.Run(publicURL, func(t *testing.T) {
			t.Parallel()
			eng := memory.New(memory.Options{})
			t.Cleanup(func() { _ = eng.Close() })
			ring, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
			if err != nil {
				t.Fatal(err)
			}
			agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i", TokenSHA256: nas.TokenSHA256("t")}})
			if err != nil {
				t.Fatal(err)
			}
			secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
			caller := capturingCaller{tokens: make(chan string, 1)}
			svc, err := nas.New(nas.Options{
				Config: nas.Config{PublicURL: publicURL, Relay: nas.RelayConfig{Secrets: []string{secret}}},
				Engine: eng, Verifier: agents, Keys: ring, Caller: caller, Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Fatal(err)
			}
			fireAt := time.Now().Add(time.Hour).Truncate(time.Second)
			res, err := eng.Arm(context.Background(), relay.ArmRequest{AgentID: "a", InstanceID: "i", JobID: "j", FireAt: fireAt, CallbackURL: "https://agent.example.com", ScheduleID: "sch-1"})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(contract.RelayRequest{ScheduleID: res.OneShot.ScheduleID, AgentID: "a", JobID: "j", FireAt: contract.NewTime(fireAt), Attempt: 1})
			key, _ := contract.ParseWebhookSecret(secret)
			h := contract.WebhookHeaders([][]byte{key}, "d-1", time.Now(), body)
			out, err := svc.Fires().Relay(context.Background(), nas.RelayHeaders{
				ID: h[contract.HeaderWebhookID], Timestamp: h[contract.HeaderWebhookTimestamp], Signature: h[contract.HeaderWebhookSignature],
			}, body)
			if err != nil || out.Kind != nas.VerdictDelivered {
				t.Fatalf("relay: %+v %v", out, err)
			}
			var c contract.FireClaims
			if _, _, err := jwt.NewParser().ParseUnverified(<-caller.tokens, &c); err != nil {
				t.Fatal(err)
			}
			if c.Issuer != publicURL {
				t.Fatalf("iss %q, want public_url %q", c.Issuer, publicURL)
			}
		})
	}
}
