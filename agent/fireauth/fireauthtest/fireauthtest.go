// Package fireauthtest mints cron_fire tokens the way NAS does, for tests of
// the verifier and of the fire handler, and holds the one table of tokens a
// verifier must refuse, so every layer is tested against the same cases.
package fireauthtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// Key is a signing key pair with its kid and algorithm.
type Key struct {
	Kid     string
	Method  jwt.SigningMethod
	Private crypto.Signer
}

// NewKey generates a key for alg ("EdDSA", "ES256" or "RS256").
func NewKey(alg, kid string) (*Key, error) {
	var (
		priv crypto.Signer
		err  error
	)
	switch alg {
	case "EdDSA":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "RS256":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		return nil, fmt.Errorf("fireauthtest: unsupported alg %q", alg)
	}
	if err != nil {
		return nil, fmt.Errorf("fireauthtest: generate %s key: %w", alg, err)
	}
	return &Key{Kid: kid, Method: jwt.GetSigningMethod(alg), Private: priv}, nil
}

// JWKS returns the public key set document for keys, as NAS publishes it.
func JWKS(keys ...*Key) ([]byte, error) {
	set := jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{}}
	for _, k := range keys {
		j, err := jwkset.NewJWKFromKey(k.Private.Public(), jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: k.Kid, ALG: jwkset.ALG(k.Method.Alg()), USE: jwkset.UseSig},
		})
		if err != nil {
			return nil, fmt.Errorf("fireauthtest: jwk %s: %w", k.Kid, err)
		}
		set.Keys = append(set.Keys, j.Marshal())
	}
	return json.Marshal(set)
}

// Fire is one fire as NAS would deliver it: the request, its exact body
// bytes, and the token's issuer, audience and issue time.
type Fire struct {
	Issuer   string
	Audience string
	Now      time.Time
	Request  contract.FireRequest
	Body     []byte
}

// NewFire returns a fire for req issued at now, with the body NAS would send.
func NewFire(issuer, audience string, now time.Time, req contract.FireRequest) Fire {
	body, err := json.Marshal(req)
	if err != nil {
		panic(err) // a FireRequest always marshals
	}
	return Fire{Issuer: issuer, Audience: audience, Now: now, Request: req, Body: body}
}

// Token is a fire token before signing; edit any part, then Sign.
type Token struct {
	Header map[string]any
	Claims jwt.MapClaims
	Method jwt.SigningMethod
	// Key signs: a private key, []byte for HMAC, or
	// jwt.UnsafeAllowNoneSignatureType for none.
	Key any
}

// NewToken returns the token NAS would mint for f with key k: every claim and
// header DESIGN.md lists, a 60 s lifetime.
func NewToken(k *Key, f Fire) *Token {
	return &Token{
		Header: map[string]any{"kid": k.Kid, "typ": contract.TokenTypeCronFire},
		Claims: jwt.MapClaims{
			"iss":         f.Issuer,
			"aud":         f.Audience,
			"purpose":     contract.PurposeCronFire,
			"iat":         f.Now.Unix(),
			"nbf":         f.Now.Unix(),
			"exp":         f.Now.Add(60 * time.Second).Unix(),
			"jti":         fmt.Sprintf("jti-%d", f.Now.UnixNano()),
			"job_id":      f.Request.JobID,
			"fire_at":     f.Request.FireAt.Text(), // as in the body, as NAS writes it
			"schedule_id": f.Request.ScheduleID,
			"attempt":     f.Request.Attempt,
			"bh":          contract.BodyHash(f.Body),
		},
		Method: k.Method,
		Key:    k.Private,
	}
}

// Sign returns the compact serialisation of t.
func (t *Token) Sign() (string, error) {
	tok := jwt.NewWithClaims(t.Method, t.Claims)
	maps.Copy(tok.Header, t.Header)
	for h, v := range t.Header {
		if v == nil {
			delete(tok.Header, h)
		}
	}
	s, err := tok.SignedString(t.Key)
	if err != nil {
		return "", fmt.Errorf("fireauthtest: sign: %w", err)
	}
	return s, nil
}

// Mint returns a valid signed token for f.
func Mint(k *Key, f Fire) (string, error) { return NewToken(k, f).Sign() }

// Case is one token a verifier must refuse with 401: Edit changes the token
// before it is signed; EditBody, when set, changes the body sent with it
// after signing, keeping the same decoded request.
type Case struct {
	Name string
	// Reason is a part of the rejection's description naming the cause.
	Reason   string
	Edit     func(t *Token, f Fire)
	EditBody func(body []byte) []byte
	// Raw, when set, is sent instead of a signed token.
	Raw string
}

// Build returns the token and body of case c for key k and fire f.
func (c Case) Build(k *Key, f Fire) (token string, body []byte, err error) {
	body = f.Body
	if c.EditBody != nil {
		body = c.EditBody(append([]byte(nil), f.Body...))
	}
	if c.Raw != "" {
		return c.Raw, body, nil
	}
	t := NewToken(k, f)
	if c.Edit != nil {
		c.Edit(t, f)
	}
	token, err = t.Sign()
	return token, body, err
}

func unix(t time.Time, d time.Duration) int64 { return t.Add(d).Unix() }

// Rejections is every way a fire token can be wrong. Each must be a 401 with
// nothing run.
var Rejections = []Case{
	{Name: "empty token", Reason: "malformed", Raw: " "},
	{Name: "not a JWT", Reason: "malformed", Raw: "not.a.jwt"},
	{Name: "alg none", Reason: "signature or algorithm", Edit: func(t *Token, _ Fire) {
		t.Method, t.Key = jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType
	}},
	{Name: "alg HS256 keyed with the public key", Reason: "signature or algorithm", Edit: func(t *Token, _ Fire) {
		pub, _ := json.Marshal(t.Key.(crypto.Signer).Public())
		t.Method, t.Key = jwt.SigningMethodHS256, pub
	}},
	{Name: "alg outside the allow-list", Reason: "signature or algorithm", Edit: func(t *Token, _ Fire) {
		k, _ := rsa.GenerateKey(rand.Reader, 2048)
		t.Method, t.Key = jwt.SigningMethodPS256, k
	}},
	{Name: "signed by another key under the same kid", Reason: "signature or algorithm", Edit: func(t *Token, _ Fire) {
		other, _ := NewKey(t.Method.Alg(), "other")
		t.Key = other.Private
	}},
	{Name: "kid missing", Reason: "kid header", Edit: func(t *Token, _ Fire) { t.Header["kid"] = nil }},
	{Name: "kid empty", Reason: "kid header", Edit: func(t *Token, _ Fire) { t.Header["kid"] = "" }},
	{Name: "kid unknown", Reason: "no key verifies", Edit: func(t *Token, _ Fire) { t.Header["kid"] = "no-such-kid" }},
	{Name: "typ missing", Reason: "typ header", Edit: func(t *Token, _ Fire) { t.Header["typ"] = nil }},
	{Name: "typ JWT", Reason: "typ header", Edit: func(t *Token, _ Fire) { t.Header["typ"] = "JWT" }},
	{Name: "aud wrong", Reason: "aud", Edit: func(t *Token, _ Fire) { t.Claims["aud"] = "agent:someone-else" }},
	{Name: "aud missing", Reason: "required claim", Edit: func(t *Token, _ Fire) { delete(t.Claims, "aud") }},
	{Name: "aud array holding the expected value", Reason: "malformed", Edit: func(t *Token, f Fire) {
		t.Claims["aud"] = []string{f.Audience, "agent:someone-else"}
	}},
	{Name: "aud single-element array", Reason: "malformed", Edit: func(t *Token, f Fire) { t.Claims["aud"] = []string{f.Audience} }},
	{Name: "iss wrong", Reason: "iss", Edit: func(t *Token, _ Fire) { t.Claims["iss"] = "https://evil.example" }},
	{Name: "iss missing", Reason: "required claim", Edit: func(t *Token, _ Fire) { delete(t.Claims, "iss") }},
	{Name: "exp missing", Reason: "required claim", Edit: func(t *Token, _ Fire) { delete(t.Claims, "exp") }},
	{Name: "expired beyond the leeway", Reason: "expired", Edit: func(t *Token, f Fire) {
		t.Claims["iat"], t.Claims["nbf"], t.Claims["exp"] = unix(f.Now, -91*time.Second), unix(f.Now, -91*time.Second), unix(f.Now, -31*time.Second)
	}},
	{Name: "iat missing", Reason: "iat is missing", Edit: func(t *Token, _ Fire) { delete(t.Claims, "iat") }},
	{Name: "lifetime over 120s", Reason: "lifetime", Edit: func(t *Token, f Fire) { t.Claims["exp"] = unix(f.Now, 121*time.Second) }},
	{Name: "exp before iat", Reason: "exp is not after iat", Edit: func(t *Token, f Fire) {
		t.Claims["iat"], t.Claims["exp"] = unix(f.Now, 10*time.Second), unix(f.Now, 5*time.Second)
	}},
	{Name: "purpose missing", Reason: "purpose", Edit: func(t *Token, _ Fire) { delete(t.Claims, "purpose") }},
	{Name: "purpose other", Reason: "purpose", Edit: func(t *Token, _ Fire) { t.Claims["purpose"] = "login" }},
	{Name: "job_id of another job", Reason: "job_id", Edit: func(t *Token, _ Fire) { t.Claims["job_id"] = "another-job" }},
	{Name: "job_id missing", Reason: "job_id", Edit: func(t *Token, _ Fire) { delete(t.Claims, "job_id") }},
	{Name: "fire_at of another slot", Reason: "fire_at", Edit: func(t *Token, f Fire) {
		t.Claims["fire_at"] = contract.FormatTime(f.Request.FireAt.Add(time.Minute))
	}},
	{Name: "schedule_id of another arm", Reason: "schedule_id", Edit: func(t *Token, _ Fire) { t.Claims["schedule_id"] = "sch_other" }},
	{Name: "attempt differs", Reason: "attempt", Edit: func(t *Token, f Fire) { t.Claims["attempt"] = f.Request.Attempt + 1 }},
	{Name: "bh missing", Reason: "bh", Edit: func(t *Token, _ Fire) { delete(t.Claims, "bh") }},
	{Name: "bh of another body", Reason: "bh", Edit: func(t *Token, _ Fire) { t.Claims["bh"] = contract.BodyHash([]byte(`{}`)) }},
	{Name: "body altered after signing", Reason: "bh", EditBody: func(body []byte) []byte {
		// Same request, different bytes: the hash binds the exact bytes.
		return append(append([]byte(" "), body...), '\n')
	}},
}

// NotYetValid are fire tokens whose only fault is that they are not valid
// yet: nbf or iat further ahead of the verifier's clock than the 30 s
// leeway, every other check passing. A fire token of these is answered 425
// too_early with a Retry-After (the fire is retried, not refused); a
// reconcile token is refused with 401, its description naming Reason.
var NotYetValid = []Case{
	{Name: "nbf beyond the leeway", Reason: "not valid yet", Edit: func(t *Token, f Fire) {
		t.Claims["nbf"], t.Claims["exp"] = unix(f.Now, 31*time.Second), unix(f.Now, 90*time.Second)
	}},
	{Name: "iat in the future beyond the leeway", Reason: "issued in the future", Edit: func(t *Token, f Fire) {
		t.Claims["iat"], t.Claims["nbf"], t.Claims["exp"] = unix(f.Now, 31*time.Second), unix(f.Now, -time.Second), unix(f.Now, 100*time.Second)
	}},
	{Name: "iat and nbf 2m ahead", Reason: "not valid yet", Edit: func(t *Token, f Fire) {
		t.Claims["iat"], t.Claims["nbf"], t.Claims["exp"] = unix(f.Now, 2*time.Minute), unix(f.Now, 2*time.Minute), unix(f.Now, 3*time.Minute)
	}},
}
