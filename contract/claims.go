package contract

import (
	"crypto/sha256"
	"encoding/base64"

	"github.com/golang-jwt/jwt/v5"
)

// Token constants of the cron_fire JWT.
const (
	// PurposeCronFire is the `purpose` claim of a fire token.
	PurposeCronFire = "cron_fire"
	// TokenTypeCronFire is the `typ` header of a fire token.
	TokenTypeCronFire = "cron-fire+jwt"
	// AudiencePrefix prefixes the instance id in the `aud` claim.
	AudiencePrefix = "agent:"
	// MaxFireTokenLifetimeSeconds bounds exp - iat of a fire token, in seconds.
	MaxFireTokenLifetimeSeconds = 120
)

// Audience returns the `aud` value NAS puts in fire tokens for an agent instance.
func Audience(instanceID string) string { return AudiencePrefix + instanceID }

// TokenClaims are the registered claims of every token NAS mints (fire and
// reconcile) and their jwt.Claims methods. Audience is a single string: a
// token whose aud is an array does not decode. Tokens carry no subject.
type TokenClaims struct {
	Issuer    string           `json:"iss"`
	Audience  string           `json:"aud"`
	Purpose   string           `json:"purpose"`
	IssuedAt  *jwt.NumericDate `json:"iat"`
	NotBefore *jwt.NumericDate `json:"nbf"`
	ExpiresAt *jwt.NumericDate `json:"exp"`
	ID        string           `json:"jti"`
}

// GetExpirationTime implements jwt.Claims.
func (c *TokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return c.ExpiresAt, nil }

// GetIssuedAt implements jwt.Claims.
func (c *TokenClaims) GetIssuedAt() (*jwt.NumericDate, error) { return c.IssuedAt, nil }

// GetNotBefore implements jwt.Claims.
func (c *TokenClaims) GetNotBefore() (*jwt.NumericDate, error) { return c.NotBefore, nil }

// GetIssuer implements jwt.Claims.
func (c *TokenClaims) GetIssuer() (string, error) { return c.Issuer, nil }

// GetSubject implements jwt.Claims; NAS's tokens carry no subject.
func (c *TokenClaims) GetSubject() (string, error) { return "", nil }

// GetAudience implements jwt.Claims.
func (c *TokenClaims) GetAudience() (jwt.ClaimStrings, error) {
	if c.Audience == "" {
		return nil, nil
	}
	return jwt.ClaimStrings{c.Audience}, nil
}

// FireClaims are the claims of the short-lived cron_fire JWT NAS mints for one
// delivery: the registered ones, the fire's own, and bh binding the token to
// the request body.
type FireClaims struct {
	TokenClaims
	JobID      string `json:"job_id"`
	FireAt     string `json:"fire_at"`
	ScheduleID string `json:"schedule_id"`
	Attempt    int    `json:"attempt"`
	BodyHash   string `json:"bh"`
}

var _ jwt.Claims = (*FireClaims)(nil)

// BodyHash returns the `bh` claim for a request body: unpadded base64url of
// its SHA-256.
func BodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
