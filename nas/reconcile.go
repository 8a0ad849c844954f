package nas

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
)

// ReconcileTokenTTL is exp - iat of a cron_reconcile token: it is sent at
// once and never retried with the same token.
const ReconcileTokenTTL = 60 * time.Second

// MintReconcile signs a cron_reconcile token for instanceID, bound to body
// (the exact bytes sent), issued at now. It is signed like a fire token:
// the active key, its kid, the same issuer and audience; only `typ`,
// `purpose` and the claims differ, so an agent never takes one for the other.
func (m *Minter) MintReconcile(now time.Time, instanceID string, body []byte) (string, error) {
	set := m.Keys.Current()
	if set == nil || set.Active == nil {
		return "", errors.New("mint reconcile: no signing key")
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", fmt.Errorf("mint reconcile: %w", err)
	}
	iat := now.Truncate(time.Second)
	claims := &contract.ReconcileClaims{
		TokenClaims: contract.TokenClaims{
			Issuer:    m.Issuer,
			Audience:  contract.Audience(instanceID),
			Purpose:   contract.PurposeCronReconcile,
			IssuedAt:  jwt.NewNumericDate(iat),
			NotBefore: jwt.NewNumericDate(iat),
			ExpiresAt: jwt.NewNumericDate(iat.Add(ReconcileTokenTTL)),
			ID:        base64.RawURLEncoding.EncodeToString(jti[:]),
		},
		BodyHash: contract.BodyHash(body),
	}
	tok := jwt.NewWithClaims(set.Active.SigningMethod(), claims)
	tok.Header["kid"] = set.Active.KID
	tok.Header["typ"] = contract.TokenTypeCronReconcile
	s, err := tok.SignedString(set.Active.Private)
	if err != nil {
		return "", fmt.Errorf("mint reconcile: %w", err)
	}
	return s, nil
}

// ReconcileURL returns the URL NAS POSTs a reconcile request to: the
// callback base URL (without a trailing /api/cron/fire) with
// /api/cron/reconcile appended.
func ReconcileURL(callback string) string {
	base := strings.TrimRight(callback, "/")
	base = strings.TrimSuffix(base, contract.PathFire)
	return strings.TrimRight(base, "/") + contract.PathReconcile
}

// reconcileCaller asks an agent to reconcile; *AgentCaller implements it.
type reconcileCaller interface {
	Reconcile(ctx context.Context, reconcileURL, token string, body []byte) agentcall.FireResult
}

var _ reconcileCaller = (*AgentCaller)(nil)

// Reconcile POSTs a reconcile request with the same guarded client as fires
// (no proxy, no redirects, the SSRF dial guard, timeouts, a capped read) and
// classifies the answer as a fire's.
func (c *AgentCaller) Reconcile(ctx context.Context, reconcileURL, token string, body []byte) agentcall.FireResult {
	return c.post(ctx, reconcileURL, token, body)
}

// reconcileBody is the exact body of a reconcile request.
func reconcileBody(instanceID, reason string) ([]byte, error) {
	return json.Marshal(contract.ReconcileRequest{InstanceID: instanceID, Reason: reason})
}
