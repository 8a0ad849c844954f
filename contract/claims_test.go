package contract_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

func TestBodyHash(t *testing.T) {
	t.Parallel()
	// SHA-256 of the empty string, e3b0c442...b855, in unpadded base64url.
	if got := contract.BodyHash(nil); got != "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU" {
		t.Errorf("BodyHash(empty) = %s", got)
	}
	for _, body := range []string{
		`{"job_id":"j1","fire_at":"2026-06-18T09:00:00Z","schedule_id":"s1","attempt":1}`,
		"\xff\xfe binary",
		strings.Repeat("a", 1000),
	} {
		sum := sha256.Sum256([]byte(body))
		want := strings.TrimRight(base64.URLEncoding.EncodeToString(sum[:]), "=")
		got := contract.BodyHash([]byte(body))
		if got != want {
			t.Errorf("BodyHash(%.20q) = %s, want %s", body, got, want)
		}
		if strings.ContainsAny(got, "+/=") || len(got) != 43 {
			t.Errorf("BodyHash(%.20q) = %s: want 43 characters of unpadded base64url", body, got)
		}
	}
	if contract.BodyHash([]byte(`{"a":1}`)) == contract.BodyHash([]byte(`{"a":1} `)) {
		t.Error("BodyHash ignores a byte of the body")
	}
}

func TestAudience(t *testing.T) {
	t.Parallel()
	if got := contract.Audience("inst_42"); got != "agent:inst_42" {
		t.Errorf("Audience = %q", got)
	}
}

// FireClaims works with golang-jwt: signed, parsed with the checks DESIGN.md
// asks for, and a token whose aud is an array does not decode.
func TestFireClaimsWithJWT(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	body := []byte(`{"job_id":"j1","fire_at":"2026-06-18T09:00:00Z","schedule_id":"s1","attempt":1}`)
	claims := &contract.FireClaims{
		TokenClaims: contract.TokenClaims{
			Issuer:    "https://nas.example.com",
			Audience:  contract.Audience("inst_42"),
			Purpose:   contract.PurposeCronFire,
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(90 * time.Second)),
			ID:        "jti-1",
		},
		JobID:      "j1",
		FireAt:     "2026-06-18T09:00:00Z",
		ScheduleID: "s1",
		Attempt:    1,
		BodyHash:   contract.BodyHash(body),
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["typ"] = contract.TokenTypeCronFire
	tok.Header["kid"] = "k1"
	signed, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	var got contract.FireClaims
	parsed, err := jwt.ParseWithClaims(signed, &got, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
		jwt.WithAudience(contract.Audience("inst_42")), jwt.WithIssuer("https://nas.example.com"))
	if err != nil {
		t.Fatalf("ParseWithClaims: %v", err)
	}
	if parsed.Header["typ"] != contract.TokenTypeCronFire {
		t.Errorf("typ = %v", parsed.Header["typ"])
	}
	if got.Audience != claims.Audience || got.Purpose != contract.PurposeCronFire || got.BodyHash != claims.BodyHash || got.Attempt != 1 || got.ExpiresAt.Sub(got.IssuedAt.Time) > contract.MaxFireTokenLifetimeSeconds*time.Second {
		t.Errorf("claims after the round trip: %+v", got)
	}
	if _, err := jwt.ParseWithClaims(signed, &contract.FireClaims{}, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithAudience(contract.Audience("inst_43"))); err == nil {
		t.Error("a token for another instance verified")
	}

	var c contract.FireClaims
	if err := json.Unmarshal([]byte(`{"aud":["agent:inst_42","agent:other"]}`), &c); err == nil {
		t.Error("claims with an aud array decoded")
	}
	if aud, _ := (&contract.FireClaims{}).GetAudience(); aud != nil {
		t.Errorf("empty audience = %v, want none", aud)
	}
	if sub, _ := claims.GetSubject(); sub != "" {
		t.Errorf("subject = %q, want none", sub)
	}
}
