package nas

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
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

	// header is the encoded JWS header segment of the key that signed last:
	// it is the same for every token a key signs.
	header atomic.Pointer[headerSegment]
}

// headerSegment is the base64url JWS header of a fire token signed by key.
type headerSegment struct {
	key      *SigningKey
	alg, kid string
	seg      string
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
	key := set.Active
	c := fireClaims{issuer: m.Issuer, iat: now.Truncate(time.Second), ttl: m.TTL, token: f}
	if c.ttl <= 0 {
		c.ttl = DefaultFireTokenTTL
	}
	if _, err := rand.Read(c.jti[:]); err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	switch priv := key.Private.(type) {
	case ed25519.PrivateKey:
		if key.Alg == AlgEdDSA {
			return mintEdDSA(m.headerSegment(key), priv, &c), nil
		}
	case *ecdsa.PrivateKey:
		if key.Alg == AlgES256 && priv.Curve == elliptic.P256() {
			return mintES256(m.headerSegment(key), priv, &c)
		}
	}
	tok := jwt.NewWithClaims(key.SigningMethod(), c.claims())
	tok.Header["kid"] = key.KID
	tok.Header["typ"] = contract.TokenTypeCronFire
	s, err := tok.SignedString(key.Private)
	if err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	return s, nil
}

// fireClaims are the claims of one fire token, as Mint gathers them.
type fireClaims struct {
	issuer string
	iat    time.Time
	ttl    time.Duration
	jti    [16]byte
	token  FireToken
}

// claims returns c as the contract's claims type, for golang-jwt.
func (c *fireClaims) claims() *contract.FireClaims {
	f := &c.token
	return &contract.FireClaims{
		TokenClaims: contract.TokenClaims{
			Issuer:    c.issuer,
			Audience:  contract.Audience(f.InstanceID),
			Purpose:   contract.PurposeCronFire,
			IssuedAt:  jwt.NewNumericDate(c.iat),
			NotBefore: jwt.NewNumericDate(c.iat),
			ExpiresAt: jwt.NewNumericDate(c.iat.Add(c.ttl)),
			ID:        base64.RawURLEncoding.EncodeToString(c.jti[:]),
		},
		JobID:      f.Fire.JobID,
		FireAt:     f.Fire.FireAt.Text(), // as in the body: the agent's own spelling
		ScheduleID: f.Fire.ScheduleID,
		Attempt:    f.Fire.Attempt,
		BodyHash:   contract.BodyHash(f.Body),
	}
}

// headerSegment returns the encoded JWS header of fire tokens signed by key,
// built once per key.
func (m *Minter) headerSegment(key *SigningKey) string {
	if h := m.header.Load(); h != nil && h.key == key && h.alg == key.Alg && h.kid == key.KID {
		return h.seg
	}
	h := &headerSegment{key: key, alg: key.Alg, kid: key.KID, seg: encodeHeader(key.Alg, key.KID)}
	m.header.Store(h)
	return h.seg
}

// encodeHeader returns the base64url JWS header segment of a fire token:
// {"alg","kid","typ"}, in golang-jwt's sorted key order.
func encodeHeader(alg, kid string) string {
	hdr := make([]byte, 0, 96)
	hdr = append(hdr, `{"alg":`...)
	hdr = contract.AppendJSONString(hdr, alg)
	hdr = append(hdr, `,"kid":`...)
	hdr = contract.AppendJSONString(hdr, kid)
	hdr = append(hdr, `,"typ":`...)
	hdr = contract.AppendJSONString(hdr, contract.TokenTypeCronFire)
	hdr = append(hdr, '}')
	return base64.RawURLEncoding.EncodeToString(hdr)
}

// Sizes of the scratch buffers a token is built in: a fire token's claims
// and signing input fit them (larger ones spill to the heap).
const (
	claimsScratch = 512
	inputScratch  = 768
)

// mintEdDSA builds and signs the compact JWS of an EdDSA fire token by hand
// (see appendSigningInput).
func mintEdDSA(header string, priv ed25519.PrivateKey, c *fireClaims) string {
	var cb [claimsScratch]byte
	var ib [inputScratch]byte
	in := appendSigningInput(ib[:0], header, c.appendJSON(cb[:0]))
	return joinJWS(in, ed25519.Sign(priv, in))
}

// es256SigSize is the size of an ES256 JWS signature: r and s, 32 bytes each.
const es256SigSize = 64

// mintES256 builds and signs the compact JWS of an ES256 fire token by hand
// (see appendSigningInput); the signature is r || s, each left-padded to 32
// bytes, as JWS (RFC 7518 section 3.4) and golang-jwt's ES256 write it.
func mintES256(header string, priv *ecdsa.PrivateKey, c *fireClaims) (string, error) {
	var cb [claimsScratch]byte
	var ib [inputScratch]byte
	in := appendSigningInput(ib[:0], header, c.appendJSON(cb[:0]))
	digest := sha256.Sum256(in)
	// Deterministic (RFC 6979: the nonce derived from the key and the
	// digest, so it never depends on the random source), and about a fifth
	// cheaper than a hedged signature. Every token's digest differs anyway:
	// its jti is random.
	der, err := priv.Sign(nil, digest[:], crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	var sig [es256SigSize]byte
	if err := es256RawSignature(der, &sig); err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	return joinJWS(in, sig[:]), nil
}

// errDERSignature is what es256RawSignature says of a signature that is
// not a P-256 one in ASN.1 DER.
var errDERSignature = errors.New("unexpected ECDSA signature encoding")

// es256RawSignature turns the ASN.1 DER ECDSA signature SEQUENCE { r
// INTEGER, s INTEGER } of a P-256 key into JWS's r || s, each big-endian and
// left-padded to 32 bytes.
func es256RawSignature(der []byte, sig *[es256SigSize]byte) error {
	bad := errDERSignature
	// The whole SEQUENCE is at most 2 + 2×(2+33) = 72 bytes: short lengths.
	if len(der) < 2 || der[0] != 0x30 || int(der[1]) != len(der)-2 || der[1] >= 0x80 {
		return bad
	}
	rest := der[2:]
	for i := range 2 {
		if len(rest) < 2 || rest[0] != 0x02 || rest[1] >= 0x80 || int(rest[1]) > len(rest)-2 || rest[1] == 0 {
			return bad
		}
		n := int(rest[1])
		v := rest[2 : 2+n]
		rest = rest[2+n:]
		if v[0]&0x80 != 0 {
			return bad // negative
		}
		for len(v) > 0 && v[0] == 0 {
			v = v[1:]
		}
		if len(v) > 32 {
			return bad
		}
		half := sig[32*i : 32*i+32]
		clear(half)
		copy(half[32-len(v):], v)
	}
	if len(rest) != 0 {
		return bad
	}
	return nil
}

// joinJWS returns the compact JWS of a signing input and its signature.
func joinJWS(in, sig []byte) string {
	enc := base64.RawURLEncoding
	var sb [128]byte // room for a base64 signature of up to 96 bytes
	s64 := enc.AppendEncode(sb[:0], sig)
	var b strings.Builder
	b.Grow(len(in) + 1 + len(s64))
	b.Write(in)
	b.WriteByte('.')
	b.Write(s64)
	return b.String()
}

// appendSigningInput appends a compact JWS's signing input to b: the
// header segment, a dot, and the claims encoded.
func appendSigningInput(b []byte, header string, claims []byte) []byte {
	b = append(b, header...)
	b = append(b, '.')
	return base64.RawURLEncoding.AppendEncode(b, claims)
}

// appendJSON appends the claims of c's token as JSON, exactly as
// encoding/json marshals the same contract.FireClaims (the claims that
// jwt.NewWithClaims(...).SigningString encodes), byte for byte, without the
// reflection, pointers and intermediate strings of that path.
func (c *fireClaims) appendJSON(b []byte) []byte {
	f := &c.token
	b = append(b, `{"iss":`...)
	b = contract.AppendJSONString(b, c.issuer)
	b = append(b, `,"aud":`...)
	b = appendAudience(b, f.InstanceID)
	b = append(b, `,"purpose":`...)
	b = contract.AppendJSONString(b, contract.PurposeCronFire)
	b = append(b, `,"iat":`...)
	b = appendNumericDate(b, c.iat)
	b = append(b, `,"nbf":`...)
	b = appendNumericDate(b, c.iat)
	b = append(b, `,"exp":`...)
	b = appendNumericDate(b, c.iat.Add(c.ttl))
	b = append(b, `,"jti":"`...)
	b = base64.RawURLEncoding.AppendEncode(b, c.jti[:])
	b = append(b, `","job_id":`...)
	b = contract.AppendJSONString(b, f.Fire.JobID)
	b = append(b, `,"fire_at":"`...)
	b = appendTimeText(b, f.Fire.FireAt)
	b = append(b, `","schedule_id":`...)
	b = contract.AppendJSONString(b, f.Fire.ScheduleID)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(f.Fire.Attempt), 10)
	b = append(b, `,"bh":"`...)
	sum := sha256.Sum256(f.Body)
	b = base64.RawURLEncoding.AppendEncode(b, sum[:])
	return append(b, `"}`...)
}

// appendAudience appends the `aud` claim for instanceID as a JSON string,
// as contract.AppendJSONString(b, contract.Audience(instanceID)) would, without
// building the string.
func appendAudience(b []byte, instanceID string) []byte {
	if !plainJSON(instanceID) {
		return contract.AppendJSONString(b, contract.Audience(instanceID))
	}
	b = append(b, '"')
	b = append(b, contract.AudiencePrefix...)
	b = append(b, instanceID...)
	return append(b, '"')
}

// appendTimeText appends t as contract.Time writes it on the wire (Text),
// unquoted: its spelling, or the canonical RFC 3339 form in UTC. Neither
// holds a character JSON escapes.
func appendTimeText(b []byte, t contract.Time) []byte {
	if s := t.Spelling(); s != "" {
		return append(b, s...)
	}
	return t.UTC().AppendFormat(b, time.RFC3339Nano)
}

// appendNumericDate appends t as golang-jwt marshals jwt.NewNumericDate(t):
// whole seconds at its default precision.
func appendNumericDate(b []byte, t time.Time) []byte {
	if jwt.TimePrecision != time.Second {
		v, _ := jwt.NewNumericDate(t).MarshalJSON()
		return append(b, v...)
	}
	return strconv.AppendInt(b, t.Truncate(time.Second).Unix(), 10)
}

// plainJSON reports whether encoding/json writes s quoted as it is: printable
// ASCII without the characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
