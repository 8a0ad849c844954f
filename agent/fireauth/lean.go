package fireauth

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// The lean path verifies the tokens NAS sends without golang-jwt's generic
// parsing (a header map, claims decoded through interfaces, big.Int
// signature halves), making the same checks in effect: it takes a token
// only while every step before the signature check passes as it would in
// parseToken, and leaves any other token to parseToken, whose verdict then
// stands. So a token it decides (verified, bad signature, bad claims) is one
// parseToken decides the same way, and a token that fails earlier gets
// parseToken's error exactly.

// tokenHeader is a token's JOSE header as parseToken and the key set's
// keyfunc read it.
type tokenHeader struct {
	alg    string
	method jwt.SigningMethod
	kid    string
	typ    string
}

// maxCachedHeaders bounds the header cache. NAS uses one header per signing
// key and kind of token, and only headers of tokens that verified are kept.
const maxCachedHeaders = 64

// headerCache maps the encoded header of tokens that verified to the
// header it decodes to, so the next token of the same key skips decoding
// it. Lookups take no lock.
type headerCache struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[string]tokenHeader]
}

func (c *headerCache) get(seg string) (tokenHeader, bool) {
	if m := c.m.Load(); m != nil {
		h, ok := (*m)[seg]
		return h, ok
	}
	return tokenHeader{}, false
}

// put records the header seg decodes to, unless the cache is full.
func (c *headerCache) put(seg string, h tokenHeader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := 0
	if old != nil {
		n = len(*old)
	}
	if n >= maxCachedHeaders {
		return
	}
	m := make(map[string]tokenHeader, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[strings.Clone(seg)] = h
	c.m.Store(&m)
}

// decodeHeader decodes an encoded header as golang-jwt does (into a map)
// and reads it as parseToken and the keyfunc do. It reports false for a
// header parseToken refuses or the keyfunc fails on.
func decodeHeader(seg string) (tokenHeader, bool) {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return tokenHeader{}, false
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return tokenHeader{}, false
	}
	alg, ok := m["alg"].(string)
	if !ok {
		return tokenHeader{}, false
	}
	kid, ok := m["kid"].(string)
	if !ok || kid == "" {
		return tokenHeader{}, false
	}
	typ, _ := m["typ"].(string)
	method := jwt.GetSigningMethod(alg)
	if method == nil {
		return tokenHeader{}, false
	}
	return tokenHeader{alg: alg, method: method, kid: kid, typ: typ}, true
}

// parseLean is parseToken for a fire token in the common case. It reports
// handled=false when token fails any step before the signature check (its
// form, header, claims' JSON, algorithm, kid, typ, the key's lookup): the
// caller then runs parseToken on fresh claims, and its error is the verdict.
// When handled, err is parseToken's verdict: nil, a signature failure
// (jwt.ErrTokenSignatureInvalid) or a claims failure
// (jwt.ErrTokenInvalidClaims), and claims are decoded.
func (v *JWTVerifier) parseLean(set *keySet, token string, claims *contract.FireClaims) (handled bool, err error) {
	hdrSeg, rest, ok := strings.Cut(token, ".")
	if !ok {
		return false, nil
	}
	claimSeg, sigSeg, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sigSeg, ".") {
		return false, nil
	}
	h, cached := v.headers.get(hdrSeg)
	if !cached {
		if h, ok = decodeHeader(hdrSeg); !ok {
			return false, nil
		}
	}
	if h.typ != fireToken.typ || !slices.Contains(v.cfg.Methods, h.alg) {
		return false, nil
	}
	k, ok := set.byKID[h.kid]
	if !ok || (k.alg != "" && k.alg != h.alg) {
		return false, nil
	}
	if !decodeClaims(claimSeg, claims) {
		return false, nil
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigSeg)
	if err != nil {
		return false, nil
	}
	if err := verifySignature(h.method, token[:len(hdrSeg)+1+len(claimSeg)], sig, k.key); err != nil {
		return true, fmt.Errorf("%w: %w", jwt.ErrTokenSignatureInvalid, err)
	}
	if err := v.validator.Validate(claims); err != nil {
		return true, fmt.Errorf("%w: %w", jwt.ErrTokenInvalidClaims, err)
	}
	if !cached {
		v.headers.put(hdrSeg, h)
	}
	return true, nil
}

// decodeClaims decodes an encoded claims segment into claims as golang-jwt
// does, reporting whether it decoded.
func decodeClaims(seg string, claims *contract.FireClaims) bool {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return false
	}
	return decodeFireClaims(b, claims)
}

// verifySignature checks sig over signingInput with key as method.Verify
// does.
func verifySignature(method jwt.SigningMethod, signingInput string, sig []byte, key any) error {
	if err := method.Verify(signingInput, sig, key); err != nil {
		return fmt.Errorf("fireauth: %s signature: %w", method.Alg(), err)
	}
	return nil
}
