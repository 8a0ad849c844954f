package fireauth

import (
	"errors"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// tooEarly answers a fire token whose signature verified but whose claims
// failed (err) when its only fault is that it is not valid yet: every other
// check, those of checkClaims included, passes. It hands the token's iat
// to Config.Issued first, so that the answer's Retry-After, the time until
// the token is valid by the clock less the leeway, is computed with what
// the token taught the clock. It returns nil when the token has another
// fault.
func (v *JWTVerifier) tooEarly(claims *contract.FireClaims, err error, body []byte, req contract.FireRequest) *contract.Error {
	from, ok := v.validFrom(claims, err)
	if !ok || v.checkClaims(claims, body, req) != "" {
		return nil
	}
	ahead := from.Sub(v.cfg.Now())
	v.observeIssued(claims)
	wait := from.Sub(v.cfg.Now().Add(v.cfg.Leeway))
	e := contract.Errorf(http.StatusTooEarly, contract.CodeTooEarly,
		"fire token is not valid yet: it is valid from %s ahead of the agent's clock; the allowed skew is %s",
		ahead.Round(time.Second), v.cfg.Leeway)
	e.RetryAfter = max(wait, time.Second)
	v.cfg.Logger.Warn("fireauth: fire token not valid yet", "job_id", req.JobID, "ahead", ahead.Round(time.Millisecond).String(), "retry_after", e.RetryAfter.String())
	return e
}

// validFrom reports whether claims, which failed golang-jwt's checks with
// err, fail only for not being valid yet: nbf or iat later than the clock
// plus the leeway, and every registered check passing at the later of the
// two. It returns that instant.
func (v *JWTVerifier) validFrom(claims jwt.Claims, err error) (time.Time, bool) {
	if claims == nil || (!errors.Is(err, jwt.ErrTokenNotValidYet) && !errors.Is(err, jwt.ErrTokenUsedBeforeIssued)) {
		return time.Time{}, false
	}
	var from time.Time
	if iat, _ := claims.GetIssuedAt(); iat != nil {
		from = iat.Time
	}
	if nbf, _ := claims.GetNotBefore(); nbf != nil && nbf.After(from) {
		from = nbf.Time
	}
	if from.IsZero() {
		return time.Time{}, false
	}
	at := v.cfg
	at.Now = func() time.Time { return from }
	then := jwt.NewValidator(claimChecks(at)...)
	if then.Validate(claims) != nil {
		return time.Time{}, false
	}
	return from, true
}
