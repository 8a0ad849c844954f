package nas

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// Minter mints cron_fire tokens with the active key of a KeyRing.
type Minter struct {
	Keys   *KeyRing
	Issuer string
	// TTL is exp - iat; 60s to 120s.
	TTL time.Duration
}

// FireToken is what Mint needs to know about one delivery.
type FireToken struct {
	InstanceID string
	Fire       contract.FireRequest
	// Body is the exact body bytes that will be sent; `bh` binds to them.
	Body []byte
}

// Mint signs a cron_fire token for f, issued at now.
func (m *Minter) Mint(now time.Time, f FireToken) (string, error) {
	set := m.Keys.Current()
	if set == nil || set.Active == nil {
		return "", errors.New("mint: no signing key")
	}
	ttl := m.TTL
	if ttl <= 0 {
		ttl = DefaultFireTokenTTL
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	iat := now.Truncate(time.Second)
	claims := &contract.FireClaims{
		TokenClaims: contract.TokenClaims{
			Issuer:    m.Issuer,
			Audience:  contract.Audience(f.InstanceID),
			Purpose:   contract.PurposeCronFire,
			IssuedAt:  jwt.NewNumericDate(iat),
			NotBefore: jwt.NewNumericDate(iat),
			ExpiresAt: jwt.NewNumericDate(iat.Add(ttl)),
			ID:        base64.RawURLEncoding.EncodeToString(jti[:]),
		},
		JobID:      f.Fire.JobID,
		FireAt:     f.Fire.FireAt.Text(), // as in the body: the agent's own spelling
		ScheduleID: f.Fire.ScheduleID,
		Attempt:    f.Fire.Attempt,
		BodyHash:   contract.BodyHash(f.Body),
	}
	if priv, ok := set.Active.Private.(ed25519.PrivateKey); ok && set.Active.Alg == AlgEdDSA {
		return mintEdDSA(set.Active.KID, priv, claims), nil
	}
	if priv, ok := set.Active.Private.(*ecdsa.PrivateKey); ok && set.Active.Alg == AlgES256 && priv.Curve == elliptic.P256() {
		return mintES256(set.Active.KID, priv, claims)
	}
	tok := jwt.NewWithClaims(set.Active.SigningMethod(), claims)
	tok.Header["kid"] = set.Active.KID
	tok.Header["typ"] = contract.TokenTypeCronFire
	s, err := tok.SignedString(set.Active.Private)
	if err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	return s, nil
}

// mintEdDSA builds and signs the compact JWS of an EdDSA fire token by hand
// (see signingInput).
func mintEdDSA(kid string, priv ed25519.PrivateKey, c *contract.FireClaims) string {
	out := signingInput("EdDSA", kid, c, ed25519.SignatureSize)
	sig := ed25519.Sign(priv, out)
	out = append(out, '.')
	out = base64.RawURLEncoding.AppendEncode(out, sig)
	return string(out)
}

// es256SigSize is the size of an ES256 JWS signature: r and s, 32 bytes each.
const es256SigSize = 64

// mintES256 builds and signs the compact JWS of an ES256 fire token by hand
// (see signingInput); the signature is r || s, each left-padded to 32 bytes,
// as JWS (RFC 7518 section 3.4) and golang-jwt's ES256 write it.
func mintES256(kid string, priv *ecdsa.PrivateKey, c *contract.FireClaims) (string, error) {
	out := signingInput(AlgES256, kid, c, es256SigSize)
	digest := sha256.Sum256(out)
	r, s, err := ecdsa.Sign(rand.Reader, priv, digest[:])
	if err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	var sig [es256SigSize]byte
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	out = append(out, '.')
	out = base64.RawURLEncoding.AppendEncode(out, sig[:])
	return string(out), nil
}

// signingInput builds the signing input of a fire token's compact JWS by
// hand: the same header ({"alg","kid","typ"}, in golang-jwt's sorted key
// order), the same claims in contract.FireClaims field order and the same
// encoding as jwt.NewWithClaims(...).SigningString, byte for byte, without
// the maps, reflection and intermediate strings of the generic path. The
// slice has room for a signature of sigSize bytes.
func signingInput(alg, kid string, c *contract.FireClaims, sigSize int) []byte {
	hdr := make([]byte, 0, 96)
	hdr = append(hdr, `{"alg":`...)
	hdr = appendJSONString(hdr, alg)
	hdr = append(hdr, `,"kid":`...)
	hdr = appendJSONString(hdr, kid)
	hdr = append(hdr, `,"typ":`...)
	hdr = appendJSONString(hdr, contract.TokenTypeCronFire)
	hdr = append(hdr, '}')
	cl := make([]byte, 0, 512)
	cl = append(cl, `{"iss":`...)
	cl = appendJSONString(cl, c.Issuer)
	cl = append(cl, `,"aud":`...)
	cl = appendJSONString(cl, c.Audience)
	cl = append(cl, `,"purpose":`...)
	cl = appendJSONString(cl, c.Purpose)
	cl = append(cl, `,"iat":`...)
	cl = appendNumericDate(cl, c.IssuedAt)
	cl = append(cl, `,"nbf":`...)
	cl = appendNumericDate(cl, c.NotBefore)
	cl = append(cl, `,"exp":`...)
	cl = appendNumericDate(cl, c.ExpiresAt)
	cl = append(cl, `,"jti":`...)
	cl = appendJSONString(cl, c.ID)
	cl = append(cl, `,"job_id":`...)
	cl = appendJSONString(cl, c.JobID)
	cl = append(cl, `,"fire_at":`...)
	cl = appendJSONString(cl, c.FireAt)
	cl = append(cl, `,"schedule_id":`...)
	cl = appendJSONString(cl, c.ScheduleID)
	cl = append(cl, `,"attempt":`...)
	cl = strconv.AppendInt(cl, int64(c.Attempt), 10)
	cl = append(cl, `,"bh":`...)
	cl = appendJSONString(cl, c.BodyHash)
	cl = append(cl, '}')
	enc := base64.RawURLEncoding
	hl, cln := enc.EncodedLen(len(hdr)), enc.EncodedLen(len(cl))
	out := make([]byte, hl+1+cln, hl+1+cln+1+enc.EncodedLen(sigSize))
	enc.Encode(out, hdr)
	out[hl] = '.'
	enc.Encode(out[hl+1:], cl)
	return out
}

// appendNumericDate appends a NumericDate as golang-jwt marshals it at its
// default whole-second precision, or null.
func appendNumericDate(b []byte, d *jwt.NumericDate) []byte {
	if d == nil {
		return append(b, "null"...)
	}
	if jwt.TimePrecision != time.Second {
		v, _ := d.MarshalJSON()
		return append(b, v...)
	}
	return strconv.AppendInt(b, d.Truncate(time.Second).Unix(), 10)
}

// appendJSONString appends s as encoding/json quotes it. Printable ASCII
// without the characters json escapes is copied as is; anything else goes
// through encoding/json so the bytes stay identical.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			v, _ := json.Marshal(s)
			return append(b, v...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
