package agenthttp_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
)

// directKey is a cron key as NAS answers it.
type directKey struct {
	id     string
	secret []byte
}

func newDirectKey(t *testing.T, id string) directKey {
	t.Helper()
	b := make([]byte, contract.CronKeyBytes)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return directKey{id: contract.CronKeyIDPrefix + id, secret: b}
}

func (k directKey) answer() contract.ProvisionResponse {
	return contract.ProvisionResponse{Delivery: contract.DeliveryDirect, CronKeyID: k.id, CronKey: base64.RawURLEncoding.EncodeToString(k.secret)}
}

// signDirect signs f as a relay dispatcher does, with golang-jwt: HS256
// under k, kid its id, the claims of a NAS token; method overrides HS256.
func signDirect(t *testing.T, k directKey, f fireauthtest.Fire, method jwt.SigningMethod) string {
	t.Helper()
	tk := fireauthtest.NewToken(&fireauthtest.Key{Kid: k.id, Method: method}, f)
	tk.Key = k.secret
	if method == jwt.SigningMethodNone {
		tk.Key = jwt.UnsafeAllowNoneSignatureType
	}
	s, err := tk.Sign()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// setupDirect is setup with the fire handler verifying through a direct
// verifier: job-1 is direct, armed at `slot` under key old and re-keyed to
// current for a later slot; job-2 is direct under its own key; job-3 is
// mediated.
func setupDirect(t *testing.T) (b *bundle, current, old, other directKey) {
	t.Helper()
	b = setup(t, nil)
	keys, err := cronkeys.Open(t.TempDir(), cronkeys.Options{Now: b.now})
	if err != nil {
		t.Fatal(err)
	}
	current, old, other = newDirectKey(t, "current"), newDirectKey(t, "old"), newDirectKey(t, "other")
	ctx := context.Background()
	for _, p := range []struct {
		job string
		at  time.Time
		k   directKey
	}{{"job-1", slot, old}, {"job-1", slot.Add(time.Hour), current}, {"job-2", slot, other}} {
		if err := keys.Provisioned(ctx, p.job, p.at, contract.DeliveryDirect, p.k.answer()); err != nil {
			t.Fatal(err)
		}
	}
	jwks, err := fireauthtest.JWKS(b.key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fireauth.Config{Issuer: issuer, Audience: audience, Now: b.now, Logger: quiet}
	nas, err := fireauth.NewStatic(jwks, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := fireauth.NewDirect(nas, keys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.server = agenthttp.New(agenthttp.Config{Firer: b.rt, Verifier: v, Logger: quiet, ReadyWait: 50 * time.Millisecond, Now: b.now})
	b.handler = apitest.New(t, b.server)
	return b, current, old, other
}

// TestDirectFireRefusals: each token direct delivery refuses is answered
// 401 invalid_token by the fire handler, and nothing is claimed or run.
func TestDirectFireRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		token func(t *testing.T, b *bundle, current, old, other directKey) string
		fire  fireauthtest.Fire
	}{
		{"another job's key", func(t *testing.T, _ *bundle, _, _, other directKey) string {
			return signDirect(t, other, fireFor("job-1", slot), jwt.SigningMethodHS256)
		}, fireFor("job-1", slot)},
		{"unknown key", func(t *testing.T, _ *bundle, _, _, _ directKey) string {
			return signDirect(t, newDirectKey(t, "unknown"), fireFor("job-1", slot), jwt.SigningMethodHS256)
		}, fireFor("job-1", slot)},
		{"retired key beyond its last slot", func(t *testing.T, _ *bundle, _, old, _ directKey) string {
			return signDirect(t, old, fireFor("job-1", slot.Add(time.Hour)), jwt.SigningMethodHS256)
		}, fireFor("job-1", slot.Add(time.Hour))},
		{"NAS token for a direct job", func(t *testing.T, b *bundle, _, _, _ directKey) string {
			return b.mint(t, fireFor("job-1", slot))
		}, fireFor("job-1", slot)},
		{"direct token for a mediated job", func(t *testing.T, _ *bundle, current, _, _ directKey) string {
			return signDirect(t, current, fireFor("job-3", slot), jwt.SigningMethodHS256)
		}, fireFor("job-3", slot)},
		{"alg none", func(t *testing.T, _ *bundle, current, _, _ directKey) string {
			return signDirect(t, current, fireFor("job-1", slot), jwt.SigningMethodNone)
		}, fireFor("job-1", slot)},
		{"HS512", func(t *testing.T, _ *bundle, current, _, _ directKey) string {
			return signDirect(t, current, fireFor("job-1", slot), jwt.SigningMethodHS512)
		}, fireFor("job-1", slot)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, current, old, other := setupDirect(t)
			rec := b.post(t, tt.token(t, b, current, old, other), tt.fire.Body)
			if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `"error":"invalid_token"`) {
				t.Fatalf("%d %s, want 401 invalid_token", rec.Code, rec.Body)
			}
			b.untouched(t)
		})
	}
}

// TestDirectFireAccepted: a fire signed under the job's key is claimed
// and run, as is the fire of a slot armed under a key retired since.
func TestDirectFireAccepted(t *testing.T) {
	t.Parallel()
	for name, key := range map[string]func(current, old directKey) directKey{
		"current key":                 func(current, _ directKey) directKey { return current },
		"retired key, its armed slot": func(_, old directKey) directKey { return old },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, current, old, _ := setupDirect(t)
			f := fireFor("job-1", slot)
			rec := b.post(t, signDirect(t, key(current, old), f, jwt.SigningMethodHS256), f.Body)
			if rec.Code != http.StatusAccepted {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			deadline := time.Now().Add(time.Minute)
			for b.runs.count("job-1") != 1 {
				if time.Now().After(deadline) {
					t.Fatal("job-1 never ran")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
