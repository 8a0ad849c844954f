package direct

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// The fire token is built by hand: the same bytes cronkey.Sign writes for
// the same claims (golang-jwt's header with its keys sorted, encoding/json's
// claims, HMAC-SHA256), without the reflection, the header map and the
// intermediate strings of that path, which are most of a direct fire's own
// CPU. TestSignIsCronkeySign holds the two to the same bytes.

// tokenScratch is room for a fire token's header, claims and signature in
// the common case (larger ones spill to the heap).
const tokenScratch = 1024

// signToken returns the token of claims under key, as cronkey.Sign does.
func signToken(key cronkey.Key, c *contract.FireClaims) string {
	if jwt.TimePrecision != time.Second {
		tok, err := cronkey.Sign(key, c)
		if err != nil {
			return ""
		}
		return tok
	}
	var hb, cb [512]byte
	header := appendHeader(hb[:0], key.ID)
	claims := appendClaims(cb[:0], c)
	enc := base64.RawURLEncoding
	var ib [tokenScratch]byte
	in := enc.AppendEncode(ib[:0], header)
	in = append(in, '.')
	in = enc.AppendEncode(in, claims)
	mac := hmac.New(sha256.New, key.Secret)
	mac.Write(in)
	var sum [sha256.Size]byte
	sig := mac.Sum(sum[:0])
	var b strings.Builder
	b.Grow(len(in) + 1 + enc.EncodedLen(len(sig)))
	b.Write(in)
	b.WriteByte('.')
	var sb [64]byte
	b.Write(enc.AppendEncode(sb[:0], sig))
	return b.String()
}

// appendHeader appends the JWS header of a direct token under kid as
// golang-jwt writes it: {"alg","kid","typ"}, keys sorted.
func appendHeader(b []byte, kid string) []byte {
	b = append(b, `{"alg":"`+contract.DirectTokenAlg+`","kid":`...)
	b = contract.AppendJSONString(b, kid)
	return append(b, `,"typ":"`+contract.TokenTypeCronFire+`"}`...)
}

// appendClaims appends c as encoding/json marshals it, byte for byte (the
// claims set golang-jwt signs), for a FireClaims whose dates are all set.
func appendClaims(b []byte, c *contract.FireClaims) []byte {
	if c.IssuedAt == nil || c.NotBefore == nil || c.ExpiresAt == nil {
		v, _ := json.Marshal(c)
		return append(b, v...)
	}
	b = append(b, `{"iss":`...)
	b = contract.AppendJSONString(b, c.Issuer)
	b = append(b, `,"aud":`...)
	b = contract.AppendJSONString(b, c.Audience)
	b = append(b, `,"purpose":`...)
	b = contract.AppendJSONString(b, c.Purpose)
	b = append(b, `,"iat":`...)
	b = strconv.AppendInt(b, c.IssuedAt.Truncate(time.Second).Unix(), 10)
	b = append(b, `,"nbf":`...)
	b = strconv.AppendInt(b, c.NotBefore.Truncate(time.Second).Unix(), 10)
	b = append(b, `,"exp":`...)
	b = strconv.AppendInt(b, c.ExpiresAt.Truncate(time.Second).Unix(), 10)
	b = append(b, `,"jti":`...)
	b = contract.AppendJSONString(b, c.ID)
	b = append(b, `,"job_id":`...)
	b = contract.AppendJSONString(b, c.JobID)
	b = append(b, `,"fire_at":`...)
	b = contract.AppendJSONString(b, c.FireAt)
	b = append(b, `,"schedule_id":`...)
	b = contract.AppendJSONString(b, c.ScheduleID)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(c.Attempt), 10)
	b = append(b, `,"bh":`...)
	b = contract.AppendJSONString(b, c.BodyHash)
	return append(b, '}')
}
