package fireauthtest

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// NewReconcile returns the reconcile request NAS sends when an operator
// starts instanceID again, issued at now: a Fire whose Body is the
// reconcile body (its Request is unused).
func NewReconcile(issuer, audience string, now time.Time, instanceID string) Fire {
	body, err := json.Marshal(contract.ReconcileRequest{InstanceID: instanceID, Reason: contract.ReconcileReasonInstanceStarted})
	if err != nil {
		panic(err) // a ReconcileRequest always marshals
	}
	return Fire{Issuer: issuer, Audience: audience, Now: now, Body: body}
}

// NewReconcileToken returns the cron_reconcile token NAS would mint for r
// with key k: a fire token's header and time claims with typ
// cron-reconcile+jwt, purpose cron_reconcile, and no claims of a fire.
func NewReconcileToken(k *Key, r Fire) *Token {
	return &Token{
		Header: map[string]any{"kid": k.Kid, "typ": contract.TokenTypeCronReconcile},
		Claims: jwt.MapClaims{
			"iss":     r.Issuer,
			"aud":     r.Audience,
			"purpose": contract.PurposeCronReconcile,
			"iat":     r.Now.Unix(),
			"nbf":     r.Now.Unix(),
			"exp":     r.Now.Add(60 * time.Second).Unix(),
			"jti":     fmt.Sprintf("jti-%d", r.Now.UnixNano()),
			"bh":      contract.BodyHash(r.Body),
		},
		Method: k.Method,
		Key:    k.Private,
	}
}

// MintReconcile returns a valid signed reconcile token for r.
func MintReconcile(k *Key, r Fire) (string, error) { return NewReconcileToken(k, r).Sign() }

// BuildReconcile returns the token and body of case c applied to a
// reconcile token.
func (c Case) BuildReconcile(k *Key, r Fire) (token string, body []byte, err error) {
	body = r.Body
	if c.EditBody != nil {
		body = c.EditBody(append([]byte(nil), r.Body...))
	}
	if c.Raw != "" {
		return c.Raw, body, nil
	}
	t := NewReconcileToken(k, r)
	if c.Edit != nil {
		c.Edit(t, r)
	}
	token, err = t.Sign()
	return token, body, err
}

// ReconcileRejections are the cases of Rejections and NotYetValid that
// apply to a reconcile token (those about a fire's own claims left out),
// each a 401.
var ReconcileRejections = slices.DeleteFunc(slices.Concat(Rejections, NotYetValid), func(c Case) bool {
	switch c.Reason {
	case "job_id", "fire_at", "schedule_id", "attempt":
		return true
	}
	return false
})
