package fireauth_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/clockskew"
	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
)

// issued records the iats a verifier reports.
type issued struct{ got []time.Time }

func (i *issued) ObserveIssued(iat time.Time) { i.got = append(i.got, iat) }

// TestVerifyFireNotYetValid: a token whose only fault is that it is not
// valid yet is 425 too_early with the time until it is valid (less the
// leeway) as Retry-After, by the verifier's clock; its iat is reported.
func TestVerifyFireNotYetValid(t *testing.T) {
	t.Parallel()
	key := mustKey(t, "ES256", "k1")
	jwks, err := fireauthtest.JWKS(key)
	if err != nil {
		t.Fatal(err)
	}
	wantRetry := map[string]time.Duration{
		"nbf beyond the leeway":               time.Second,
		"iat in the future beyond the leeway": time.Second,
		"iat and nbf 2m ahead":                90 * time.Second,
	}
	for _, c := range fireauthtest.NotYetValid {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			seen := &issued{}
			v, err := fireauth.NewStatic(jwks, fireauth.Config{Issuer: issuer, Audience: audience,
				Now: func() time.Time { return now }, Logger: quiet, Issued: seen})
			if err != nil {
				t.Fatal(err)
			}
			f := newFire()
			token, body, err := c.Build(key, f)
			if err != nil {
				t.Fatal(err)
			}
			ce := wantStatus(t, v.VerifyFire(context.Background(), token, body, f.Request), http.StatusTooEarly)
			if ce.Code != contract.CodeTooEarly {
				t.Fatalf("code %q, want %q", ce.Code, contract.CodeTooEarly)
			}
			want, ok := wantRetry[c.Name]
			if !ok {
				t.Fatalf("no expected Retry-After for %q", c.Name)
			}
			if ce.RetryAfter != want {
				t.Fatalf("Retry-After %s, want %s", ce.RetryAfter, want)
			}
			if len(seen.got) != 1 {
				t.Fatalf("iat reported %d times, want once", len(seen.got))
			}
		})
	}
}

// TestVerifyFireNotYetValidWithAnotherFault: a token not valid yet that
// fails any other check is refused with 401, and teaches the clock nothing.
func TestVerifyFireNotYetValidWithAnotherFault(t *testing.T) {
	t.Parallel()
	key, other := mustKey(t, "EdDSA", "k1"), mustKey(t, "EdDSA", "k1")
	jwks, err := fireauthtest.JWKS(key)
	if err != nil {
		t.Fatal(err)
	}
	ahead := func(tk *fireauthtest.Token, f fireauthtest.Fire) {
		tk.Claims["iat"], tk.Claims["nbf"], tk.Claims["exp"] = f.Now.Add(2*time.Minute).Unix(), f.Now.Add(2*time.Minute).Unix(), f.Now.Add(3*time.Minute).Unix()
	}
	tests := []struct {
		name string
		key  *fireauthtest.Key
		edit func(*fireauthtest.Token, fireauthtest.Fire)
		body func([]byte) []byte
	}{
		{name: "signed by another key", key: other},
		{name: "aud wrong", edit: func(tk *fireauthtest.Token, _ fireauthtest.Fire) { tk.Claims["aud"] = "agent:someone-else" }},
		{name: "iss wrong", edit: func(tk *fireauthtest.Token, _ fireauthtest.Fire) { tk.Claims["iss"] = "https://evil.example" }},
		{name: "exp missing", edit: func(tk *fireauthtest.Token, _ fireauthtest.Fire) { delete(tk.Claims, "exp") }},
		{name: "exp before nbf", edit: func(tk *fireauthtest.Token, f fireauthtest.Fire) { tk.Claims["exp"] = f.Now.Add(time.Minute).Unix() }},
		{name: "lifetime over 120s", edit: func(tk *fireauthtest.Token, f fireauthtest.Fire) {
			tk.Claims["exp"] = f.Now.Add(5 * time.Minute).Unix()
		}},
		{name: "purpose other", edit: func(tk *fireauthtest.Token, _ fireauthtest.Fire) { tk.Claims["purpose"] = "login" }},
		{name: "job_id of another job", edit: func(tk *fireauthtest.Token, _ fireauthtest.Fire) { tk.Claims["job_id"] = "another-job" }},
		{name: "body altered", body: func(b []byte) []byte { return append(b[:len(b)-1], ' ', '}') }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seen := &issued{}
			v, err := fireauth.NewStatic(jwks, fireauth.Config{Issuer: issuer, Audience: audience,
				Now: func() time.Time { return now }, Logger: quiet, Issued: seen})
			if err != nil {
				t.Fatal(err)
			}
			f := newFire()
			k := key
			if tt.key != nil {
				k = tt.key
			}
			c := fireauthtest.Case{Edit: func(tk *fireauthtest.Token, f fireauthtest.Fire) {
				ahead(tk, f)
				if tt.edit != nil {
					tt.edit(tk, f)
				}
			}, EditBody: tt.body}
			token, body, err := c.Build(k, f)
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, v.VerifyFire(context.Background(), token, body, f.Request), http.StatusUnauthorized)
			if len(seen.got) != 0 {
				t.Fatalf("a refused token reported its iat %v", seen.got)
			}
		})
	}
}

// TestVerifyFireFollowsNASClock: with the host's clock 2 minutes off NAS's
// either way, a verifier judging by the skew estimator's clock accepts NAS's
// tokens once a NAS answer's Date taught it the skew; a host behind learns
// it from the first token too, which is 425 with a Retry-After of a second.
func TestVerifyFireFollowsNASClock(t *testing.T) {
	t.Parallel()
	key := mustKey(t, "EdDSA", "k1")
	jwks, err := fireauthtest.JWKS(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, shift := range []time.Duration{-2 * time.Minute, 2 * time.Minute} {
		for _, learn := range []string{"date", "token"} {
			if shift > 0 && learn == "token" {
				continue // an expired token teaches nothing: NAS's Date does
			}
			t.Run(shift.String()+"/"+learn, func(t *testing.T) {
				t.Parallel()
				local := now.Add(shift) // NAS's clock reads now
				est := clockskew.New(clockskew.Options{Local: func() time.Time { return local }, Logger: quiet})
				v, err := fireauth.NewStatic(jwks, fireauth.Config{Issuer: issuer, Audience: audience,
					Now: est.Now, Logger: quiet, Issued: est})
				if err != nil {
					t.Fatal(err)
				}
				f := newFire()
				token, err := fireauthtest.Mint(key, f)
				if err != nil {
					t.Fatal(err)
				}
				if learn == "date" {
					est.ObserveDate(local, local, now)
				} else {
					ce := wantStatus(t, v.VerifyFire(context.Background(), token, f.Body, f.Request), http.StatusTooEarly)
					if ce.RetryAfter != time.Second {
						t.Fatalf("Retry-After %s once the token taught the clock, want 1s", ce.RetryAfter)
					}
				}
				if err := v.VerifyFire(context.Background(), token, f.Body, f.Request); err != nil {
					t.Fatalf("NAS's token refused with the skew known (offset %s): %v", est.Offset(), err)
				}
				if off := est.Offset(); off < -shift-time.Second || off > -shift+time.Second {
					t.Fatalf("offset %s, want about %s", off, -shift)
				}
			})
		}
	}
}
