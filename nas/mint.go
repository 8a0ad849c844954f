package nas

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

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
		Issuer:     m.Issuer,
		Audience:   contract.Audience(f.InstanceID),
		Purpose:    contract.PurposeCronFire,
		IssuedAt:   jwt.NewNumericDate(iat),
		NotBefore:  jwt.NewNumericDate(iat),
		ExpiresAt:  jwt.NewNumericDate(iat.Add(ttl)),
		ID:         base64.RawURLEncoding.EncodeToString(jti[:]),
		JobID:      f.Fire.JobID,
		FireAt:     f.Fire.FireAt.String(),
		ScheduleID: f.Fire.ScheduleID,
		Attempt:    f.Fire.Attempt,
		BodyHash:   contract.BodyHash(f.Body),
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
