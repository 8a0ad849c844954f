package fireauth

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// errBadReconcileTyp refuses a token whose typ is not cron-reconcile+jwt
// (a fire token among them).
var errBadReconcileTyp = errors.New("typ header is not " + contract.TokenTypeCronReconcile)

// rejectReconcile is a 401 invalid_token whose description is safe to send.
func rejectReconcile(reason string) *contract.Error {
	return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "reconcile token rejected: %s", reason)
}

// VerifyReconcile checks a cron_reconcile token sent with the exact body
// bytes body, exactly as VerifyFire checks a fire token (the same key set,
// algorithms, issuer, audience, time and lifetime checks, kid required), but
// with typ cron-reconcile+jwt and purpose cron_reconcile: a fire token is
// refused here, and a reconcile token by VerifyFire. It returns nil when the
// request may proceed, a 401 invalid_token *contract.Error when the token is
// refused, and a 503 *contract.Error while the key set is not loaded yet (or
// cannot be fetched to find an unknown kid).
func (v *JWTVerifier) VerifyReconcile(ctx context.Context, token string, body []byte) error {
	if token == "" {
		return rejectReconcile("no token")
	}
	set := v.set.Load()
	if set == nil {
		if reason := v.refuseUnsignedReconcile(token, body); reason != "" {
			v.cfg.Logger.Warn("fireauth: reconcile token rejected", "reason", reason)
			return rejectReconcile(reason)
		}
		return unavailable(notReadyRetryAfter, "the agent has not loaded NAS's signing keys yet")
	}
	claims, err := v.parseReconcile(ctx, set, token)
	if errors.Is(err, errUnknownKID) && !v.static {
		// As for a fire token: a kid the set lacks waits for the shared,
		// rate-limited fetch, so made-up kids cannot starve a real one.
		if reason := v.refuseUnsignedReconcile(token, body); reason != "" {
			v.cfg.Logger.Warn("fireauth: reconcile token rejected", "reason", reason)
			return rejectReconcile(reason)
		}
		call, wait := v.fetchForUnknownKID()
		if call == nil {
			if cur := v.set.Load(); cur != set {
				claims, err = v.parseReconcile(ctx, cur, token)
			}
			if errors.Is(err, errUnknownKID) {
				return unavailable(wait, "the token's kid is not in NAS's key set as fetched moments ago; retry once it may be fetched again")
			}
		} else {
			select {
			case <-call.done:
			case <-ctx.Done():
				return unavailable(time.Second, "gave up waiting for NAS's key set")
			}
			claims, err = v.parseReconcile(ctx, v.set.Load(), token)
			if errors.Is(err, errUnknownKID) {
				return unavailable(v.untilUnknownKIDFetch(), "the token's kid is not in NAS's key set; retry once it may be fetched again")
			}
		}
	}
	if err != nil {
		reason := reconcileParseReason(err)
		v.cfg.Logger.Warn("fireauth: reconcile token rejected", "reason", reason, "error", err)
		return rejectReconcile(reason)
	}
	if reason := v.checkReconcileClaims(claims, body); reason != "" {
		v.cfg.Logger.Warn("fireauth: reconcile token rejected", "reason", reason)
		return rejectReconcile(reason)
	}
	return nil
}

// parseReconcile is parse for a reconcile token (typ cron-reconcile+jwt).
func (v *JWTVerifier) parseReconcile(ctx context.Context, set *keySet, token string) (*contract.ReconcileClaims, error) {
	// golang-jwt's parser alone: the lean path saves about 4% of a
	// reconcile token's check (its claims go through encoding/json either
	// way), not worth a second path for one token per reconcile.
	claims := &contract.ReconcileClaims{}
	return claims, v.parseToken(ctx, set, token, claims, reconcileToken)
}

// refuseUnsignedReconcile is refuseUnsigned for a reconcile token.
func (v *JWTVerifier) refuseUnsignedReconcile(token string, body []byte) string {
	claims := &contract.ReconcileClaims{}
	t, _, err := jwt.NewParser().ParseUnverified(token, claims)
	switch {
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "signature or algorithm not accepted"
	case err != nil:
		return reconcileParseReason(err)
	case !slices.Contains(v.cfg.Methods, t.Method.Alg()):
		return "signature or algorithm not accepted"
	}
	if kid, ok := t.Header["kid"].(string); !ok || kid == "" {
		return reconcileParseReason(errNoKID)
	}
	if typ, _ := t.Header["typ"].(string); typ != contract.TokenTypeCronReconcile {
		return reconcileParseReason(errBadReconcileTyp)
	}
	if err := v.validator.Validate(claims); err != nil {
		return reconcileParseReason(err)
	}
	return v.checkReconcileClaims(claims, body)
}

// checkReconcileClaims applies the checks golang-jwt does not.
func (v *JWTVerifier) checkReconcileClaims(c *contract.ReconcileClaims, body []byte) string {
	if reason := v.checkEnvelope(c.Audience, c.IssuedAt, c.ExpiresAt, c.Purpose, contract.PurposeCronReconcile); reason != "" {
		return reason
	}
	if !bodyHashMatches(c.BodyHash, body) {
		return "bh does not match the body"
	}
	return ""
}

func reconcileParseReason(err error) string {
	if errors.Is(err, errBadReconcileTyp) {
		return errBadReconcileTyp.Error()
	}
	return parseReason(err)
}
