package fireauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// verified maps the result of parse for a known kid.
func (v *JWTVerifier) verified(claims *contract.FireClaims, err error, body []byte, req contract.FireRequest) (*contract.FireClaims, *contract.Error) {
	if err != nil {
		if e := v.tooEarly(claims, err, body, req); e != nil {
			return nil, e
		}
		reason := parseReason(err)
		v.cfg.Logger.Warn("fireauth: fire token rejected", "job_id", req.JobID, "reason", reason, "error", err)
		return nil, reject(reason)
	}
	return claims, nil
}

// parse verifies token's signature with set and its registered claims,
// requiring the kid and typ headers. A kid the set lacks is errUnknownKID.
func (v *JWTVerifier) parse(ctx context.Context, set *keySet, token string) (*contract.FireClaims, error) {
	claims := &contract.FireClaims{}
	if handled, err := v.parseLean(set, token, claims); handled {
		return claims, err
	}
	claims = &contract.FireClaims{}
	return claims, v.parseToken(ctx, set, token, claims, fireToken)
}

// tokenKind is what a kind of NAS token carries in its typ header, and the
// error that refuses a token of another typ.
type tokenKind struct {
	typ    string
	badTyp error
}

// The kinds of token NAS sends an agent.
var (
	fireToken      = tokenKind{typ: contract.TokenTypeCronFire, badTyp: errBadTyp}
	reconcileToken = tokenKind{typ: contract.TokenTypeCronReconcile, badTyp: errBadReconcileTyp}
)

// parseToken verifies token into claims with set: its signature, its
// registered claims, a kid header and the typ header of kind (kind.badTyp
// when it is another). A kid the set lacks is errUnknownKID.
func (v *JWTVerifier) parseToken(ctx context.Context, set *keySet, token string, claims jwt.Claims, kind tokenKind) error {
	keys := set.kf.KeyfuncCtx(ctx)
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if kid, ok := t.Header["kid"].(string); !ok || kid == "" {
			return nil, errNoKID
		}
		if got, _ := t.Header["typ"].(string); got != kind.typ {
			return nil, kind.badTyp
		}
		k, err := keys(t)
		if errors.Is(err, jwkset.ErrKeyNotFound) {
			return nil, errUnknownKID
		}
		return k, err
	})
	return err
}

// refuseUnsigned applies every check that needs no key to token, unverified:
// its form, algorithm, kid and typ headers, time and issuer claims, and the
// checks of checkClaims. It returns the reason of the first failure, or ""
// when only the signature is left to check.
func (v *JWTVerifier) refuseUnsigned(token string, body []byte, req contract.FireRequest) string {
	claims := &contract.FireClaims{}
	t, _, err := jwt.NewParser().ParseUnverified(token, claims)
	switch {
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "signature or algorithm not accepted" // an algorithm golang-jwt does not know
	case err != nil:
		return parseReason(err)
	case !slices.Contains(v.cfg.Methods, t.Method.Alg()):
		return "signature or algorithm not accepted"
	}
	if kid, ok := t.Header["kid"].(string); !ok || kid == "" {
		return parseReason(errNoKID)
	}
	if typ, _ := t.Header["typ"].(string); typ != contract.TokenTypeCronFire {
		return parseReason(errBadTyp)
	}
	if err := v.validator.Validate(claims); err != nil {
		// A token only early is left to the signature check: once the
		// keys decide, it is 425, not refused.
		if _, early := v.validFrom(claims, err); !early {
			return parseReason(err)
		}
	}
	return v.checkClaims(claims, body, req)
}

// checkClaims applies the checks golang-jwt does not: returns "" when the
// claims are acceptable, else the reason.
func (v *JWTVerifier) checkClaims(c *contract.FireClaims, body []byte, req contract.FireRequest) string {
	if reason := v.checkEnvelope(c.Audience, c.IssuedAt, c.ExpiresAt, c.Purpose, contract.PurposeCronFire); reason != "" {
		return reason
	}
	switch {
	case c.JobID == "" || c.JobID != req.JobID:
		return "job_id does not match the body"
	case c.ScheduleID != req.ScheduleID:
		return "schedule_id does not match the body"
	case c.Attempt != req.Attempt:
		return "attempt does not match the body"
	}
	at, err := contract.ParseTime(c.FireAt)
	if err != nil || !at.Equal(req.FireAt.Time) {
		return "fire_at does not match the body"
	}
	if !bodyHashMatches(c.BodyHash, body) {
		return "bh does not match the body"
	}
	return ""
}

// bodyHashLen is the length of contract.BodyHash's result: a SHA-256 in
// unpadded base64url.
const bodyHashLen = (sha256.Size*8 + 5) / 6

// bodyHashMatches reports whether bh equals contract.BodyHash(body),
// comparing in constant time as subtle.ConstantTimeCompare does, without
// building either as a heap string.
func bodyHashMatches(bh string, body []byte) bool {
	sum := sha256.Sum256(body)
	var want [bodyHashLen]byte
	base64.RawURLEncoding.Encode(want[:], sum[:])
	if len(bh) != len(want) {
		return false
	}
	var diff byte
	for i := range want {
		diff |= bh[i] ^ want[i]
	}
	return subtle.ConstantTimeByteEq(diff, 0) == 1
}

// checkEnvelope applies the checks every NAS token gets beyond golang-jwt's:
// the single expected aud, iat and exp present, a lifetime of at most
// MaxLifetime, and the purpose want. It returns "" or the reason.
func (v *JWTVerifier) checkEnvelope(aud string, iat, exp *jwt.NumericDate, purpose, want string) string {
	switch {
	case aud != v.cfg.Audience:
		return "aud does not name this agent"
	case iat == nil:
		return "iat is missing"
	case exp == nil:
		return "exp is missing"
	}
	life := exp.Sub(iat.Time)
	switch {
	case life <= 0:
		return "exp is not after iat"
	case life > v.cfg.MaxLifetime:
		return fmt.Sprintf("lifetime exp - iat is %s, more than %s", life, v.cfg.MaxLifetime)
	case purpose != want:
		return "purpose is not " + want
	}
	return ""
}

// parseReason names what golang-jwt refused, without echoing token contents.
func parseReason(err error) string {
	switch {
	case errors.Is(err, errNoKID):
		return "kid header is missing"
	case errors.Is(err, errBadTyp):
		return "typ header is not " + contract.TokenTypeCronFire
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "signature or algorithm not accepted"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "no key verifies this token"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "a required claim is missing"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token is expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token is not valid yet"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token is issued in the future"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "aud does not name this agent"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "iss is not NAS"
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return "invalid claims"
	default:
		return "token could not be verified"
	}
}
