package direct

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// TestSignIsCronkeySign: the hand-built token is, byte for byte, the one
// cronkey.Sign writes for the same claims, escaped strings included.
func TestSignIsCronkeySign(t *testing.T) {
	t.Parallel()
	k, err := cronkey.Mint()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 987654321, time.UTC)
	claims := func(iss, job, fireAt, sched string, attempt int) *contract.FireClaims {
		return &contract.FireClaims{
			TokenClaims: contract.TokenClaims{Issuer: iss, Audience: contract.Audience("inst-1"), Purpose: contract.PurposeCronFire,
				IssuedAt: jwt.NewNumericDate(at), NotBefore: jwt.NewNumericDate(at), ExpiresAt: jwt.NewNumericDate(at.Add(90 * time.Second)), ID: "jti-1"},
			JobID: job, FireAt: fireAt, ScheduleID: sched, Attempt: attempt, BodyHash: contract.BodyHash([]byte(job)),
		}
	}
	for _, c := range []*contract.FireClaims{
		claims("https://nas.example", "job-1", "2026-11-30T09:00:00Z", "sch-1", 1),
		claims("https://nas.example/a?b=<c>&d", `j"o\b`, "2026-11-30T10:00:00.5+01:00", "sch-\u00e9\u2028\x00", 12),
		claims("", "", "", "", 0),
		{TokenClaims: contract.TokenClaims{Issuer: "https://nas.example"}, JobID: "no dates"},
	} {
		want, err := cronkey.Sign(k, c)
		if err != nil {
			t.Fatal(err)
		}
		if got := signToken(k, c); got != want {
			t.Errorf("claims %+v:\n got  %s\n want %s", c, got, want)
		}
	}
}

func BenchmarkSign(b *testing.B) {
	k, _ := cronkey.Mint()
	now := time.Now()
	c := &contract.FireClaims{
		TokenClaims: contract.TokenClaims{Issuer: "https://nas.example", Audience: contract.Audience("inst-1"), Purpose: contract.PurposeCronFire,
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(90 * time.Second)), ID: "0123456789abcdefghijkl"},
		JobID: "job-0000001", FireAt: "2026-11-30T09:00:00Z", ScheduleID: "sch_0123456789", Attempt: 1, BodyHash: contract.BodyHash([]byte("{}")),
	}
	b.Run("hand-built", func(b *testing.B) {
		for b.Loop() {
			_ = signToken(k, c)
		}
	})
	b.Run("cronkey.Sign", func(b *testing.B) {
		for b.Loop() {
			_, _ = cronkey.Sign(k, c)
		}
	})
}
