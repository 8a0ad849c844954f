package fireauth_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
)

// cronKey is a key as NAS returns it in a provision answer.
type cronKey struct {
	id     string
	secret []byte
}

func newCronKey(t testing.TB, id string) cronKey {
	t.Helper()
	b := make([]byte, contract.CronKeyBytes)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return cronKey{id: contract.CronKeyIDPrefix + id, secret: b}
}

func (k cronKey) answer() contract.ProvisionResponse {
	return contract.ProvisionResponse{Delivery: contract.DeliveryDirect, CronKeyID: k.id, CronKey: base64.RawURLEncoding.EncodeToString(k.secret)}
}

// directToken returns the token a dispatcher signs for f under k (as
// relay/cronkey.Sign does), ready to edit.
func directToken(k cronKey, f fireauthtest.Fire) *fireauthtest.Token {
	tk := fireauthtest.NewToken(&fireauthtest.Key{Kid: k.id, Method: jwt.SigningMethodHS256}, f)
	tk.Claims["exp"] = f.Now.Add(contract.DirectTokenLifetimeSeconds * time.Second).Unix()
	tk.Key = k.secret
	return tk
}

func sign(t *testing.T, tk *fireauthtest.Token) string {
	t.Helper()
	s, err := tk.Sign()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// directEnv is a direct verifier over a key store in a temporary home and
// a static NAS verifier with one ES256 key.
type directEnv struct {
	v     *fireauth.DirectVerifier
	keys  *cronkeys.Store
	nas   *fireauthtest.Key
	log   *bytes.Buffer
	clock *time.Time
}

const (
	directJob = "ab12cd34" // the job of newFire
	otherJob  = "other-job"
	plainJob  = "plain-job"
)

func newDirectEnv(t *testing.T) *directEnv {
	t.Helper()
	e := &directEnv{nas: mustKey(t, "ES256", "nas-1"), log: &bytes.Buffer{}}
	clock := now
	e.clock = &clock
	nowf := func() time.Time { return *e.clock }
	log := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	keys, err := cronkeys.Open(t.TempDir(), cronkeys.Options{Now: nowf, Logger: log, PendingWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.keys = keys
	nas := staticVerifier(t, e.nas)
	t.Cleanup(nas.Close)
	e.v, err = fireauth.NewDirect(nas, keys, fireauth.Config{Issuer: issuer, Audience: audience, Now: nowf, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *directEnv) provision(t *testing.T, jobID string, slot time.Time, resp contract.ProvisionResponse) {
	t.Helper()
	if err := e.keys.Provisioned(context.Background(), jobID, slot, contract.DeliveryDirect, resp); err != nil {
		t.Fatal(err)
	}
}

// fireFor is a fire of job at slot, issued now.
func fireFor(job string, slot time.Time) fireauthtest.Fire {
	return fireauthtest.NewFire(issuer, audience, now, contract.FireRequest{JobID: job, FireAt: contract.NewTime(slot), ScheduleID: "sch_1", Attempt: 1})
}

// TestDirectVerifierRefuses: every token direct delivery must refuse is a
// 401 invalid_token.
func TestDirectVerifierRefuses(t *testing.T) {
	t.Parallel()
	e := newDirectEnv(t)
	current, other := newCronKey(t, "current"), newCronKey(t, "other")
	old := newCronKey(t, "old")
	slot := now
	// directJob: armed under old up to slot, then re-keyed to current for
	// a later slot; otherJob is direct under its own key; plainJob is
	// mediated.
	e.provision(t, directJob, slot, old.answer())
	e.provision(t, directJob, slot.Add(time.Hour), current.answer())
	e.provision(t, otherJob, slot, other.answer())
	unix := func(d time.Duration) int64 { return now.Add(d).Unix() }

	tests := []struct {
		name string
		// want is the reason the refusal gives.
		want string
		// build returns the token and the fire it is presented with.
		build func(t *testing.T) (string, fireauthtest.Fire)
	}{
		{"another job's key", "kid is not a cron key of this job", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			return sign(t, directToken(other, f)), f
		}},
		{"another job's key and job_id", "job_id does not match the body", func(t *testing.T) (string, fireauthtest.Fire) {
			tk := directToken(other, fireFor(otherJob, slot))
			return sign(t, tk), fireFor(directJob, slot)
		}},
		{"unknown key", "kid is not a cron key of this job", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			return sign(t, directToken(newCronKey(t, "unknown"), f)), f
		}},
		{"known kid, another secret", "signature or algorithm not accepted", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			forged := newCronKey(t, "x")
			forged.id = current.id
			return sign(t, directToken(forged, f)), f
		}},
		{"retired key beyond its last slot", "the cron key is retired: it verifies no slot after the last one armed under it", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot.Add(time.Hour))
			return sign(t, directToken(old, f)), f
		}},
		{"NAS token for a direct job", "the job is delivered directly: only a token signed with its cron key (HS256) is accepted", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tok, err := fireauthtest.Mint(e.nas, f)
			if err != nil {
				t.Fatal(err)
			}
			return tok, f
		}},
		{"direct token for a mediated job", "kid is not a cron key of this job", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(plainJob, slot)
			return sign(t, directToken(current, f)), f
		}},
		{"alg none", "the job is delivered directly: only a token signed with its cron key (HS256) is accepted", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Method, tk.Key = jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType
			return sign(t, tk), f
		}},
		{"alg none for a mediated job", "signature or algorithm not accepted", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(plainJob, slot)
			tk := directToken(current, f)
			tk.Method, tk.Key = jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType
			return sign(t, tk), f
		}},
		{"HS384 under the key", "the job is delivered directly: only a token signed with its cron key (HS256) is accepted", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Method = jwt.SigningMethodHS384
			return sign(t, tk), f
		}},
		{"HS512 under the key", "the job is delivered directly: only a token signed with its cron key (HS256) is accepted", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Method = jwt.SigningMethodHS512
			return sign(t, tk), f
		}},
		{"HS256 signed with NAS's kid", "kid is not a cron key", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			k := current
			k.id = "nas-1"
			return sign(t, directToken(k, f)), f
		}},
		{"no kid", "kid header is missing", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Header["kid"] = nil
			return sign(t, tk), f
		}},
		{"wrong typ", "typ header is not cron-fire+jwt", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Header["typ"] = "JWT"
			return sign(t, tk), f
		}},
		{"wrong iss", "iss is not NAS", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["iss"] = "https://evil.example"
			return sign(t, tk), f
		}},
		{"wrong aud", "aud does not name this agent", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["aud"] = "agent:other"
			return sign(t, tk), f
		}},
		{"aud array", "malformed token", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["aud"] = []string{audience, "agent:other"}
			return sign(t, tk), f
		}},
		{"wrong purpose", "purpose is not cron_fire", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["purpose"] = contract.PurposeCronReconcile
			return sign(t, tk), f
		}},
		{"expired beyond the leeway", "token is expired", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["iat"], tk.Claims["nbf"], tk.Claims["exp"] = unix(-150*time.Second), unix(-150*time.Second), unix(-60*time.Second)
			return sign(t, tk), f
		}},
		{"no exp", "a required claim is missing", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			delete(tk.Claims, "exp")
			return sign(t, tk), f
		}},
		{"lifetime over 120s", "lifetime exp - iat", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["exp"] = unix(10 * time.Minute)
			return sign(t, tk), f
		}},
		{"bh of another body", "bh does not match the body", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["bh"] = contract.BodyHash([]byte(`{}`))
			return sign(t, tk), f
		}},
		{"fire_at of another slot", "fire_at does not match the body", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["fire_at"] = contract.FormatTime(slot.Add(time.Minute))
			return sign(t, tk), f
		}},
		{"job_id of another job", "job_id does not match the body", func(t *testing.T) (string, fireauthtest.Fire) {
			f := fireFor(directJob, slot)
			tk := directToken(current, f)
			tk.Claims["job_id"] = otherJob
			return sign(t, tk), f
		}},
		{"malformed", "malformed token", func(t *testing.T) (string, fireauthtest.Fire) {
			return "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30", fireFor(directJob, slot)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			token, f := tt.build(t)
			err := e.v.VerifyFire(context.Background(), token, f.Body, f.Request)
			ce := wantStatus(t, err, http.StatusUnauthorized)
			if ce.Code != contract.CodeInvalidToken || !strings.Contains(ce.Description, tt.want) {
				t.Fatalf("%s %q, want invalid_token: %s", ce.Code, ce.Description, tt.want)
			}
		})
	}
}

// TestDirectVerifierAccepts: the current key, a retired key for the slots
// armed under it (a re-key while a fire is armed), NAS's tokens for a
// mediated job, and a token that is only early is 425 as NAS's is.
func TestDirectVerifierAccepts(t *testing.T) {
	t.Parallel()
	e := newDirectEnv(t)
	slot := now
	first := newCronKey(t, "first")
	e.provision(t, directJob, slot, first.answer())
	f := fireFor(directJob, slot)
	if err := e.v.VerifyFire(context.Background(), sign(t, directToken(first, f)), f.Body, f.Request); err != nil {
		t.Fatalf("current key: %v", err)
	}
	// Re-key: NAS answers the same armed slot with a new key. The fire
	// armed under the old key still verifies, and so does the new key's.
	second := newCronKey(t, "second")
	e.provision(t, directJob, slot, second.answer())
	for name, k := range map[string]cronKey{"old key": first, "new key": second} {
		if err := e.v.VerifyFire(context.Background(), sign(t, directToken(k, f)), f.Body, f.Request); err != nil {
			t.Fatalf("%s after re-key, armed slot: %v", name, err)
		}
	}
	// An earlier slot than the retired key's last is covered too.
	early := fireFor(directJob, slot.Add(-time.Minute))
	if err := e.v.VerifyFire(context.Background(), sign(t, directToken(first, early)), early.Body, early.Request); err != nil {
		t.Fatalf("retired key, earlier slot: %v", err)
	}
	// NAS's token for a mediated job goes to the NAS verifier.
	p := fireFor(plainJob, slot)
	tok, err := fireauthtest.Mint(e.nas, p)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time from the header cache
		if err := e.v.VerifyFire(context.Background(), tok, p.Body, p.Request); err != nil {
			t.Fatalf("NAS token, mediated job: %v", err)
		}
	}
	// Not valid yet beyond the leeway: 425, as for NAS's tokens.
	tk := directToken(second, f)
	tk.Claims["iat"], tk.Claims["nbf"], tk.Claims["exp"] = now.Add(time.Minute).Unix(), now.Add(time.Minute).Unix(), now.Add(150*time.Second).Unix()
	wantStatus(t, e.v.VerifyFire(context.Background(), sign(t, tk), f.Body, f.Request), http.StatusTooEarly)
	// The cancel drops the keys at once.
	if err := e.keys.Drop(context.Background(), directJob); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.v.VerifyFire(context.Background(), sign(t, directToken(second, f)), f.Body, f.Request), http.StatusUnauthorized)
	for _, k := range []cronKey{first, second} {
		if strings.Contains(e.log.String(), base64.RawURLEncoding.EncodeToString(k.secret)) {
			t.Fatal("a key is in the log")
		}
	}
}

// TestDirectVerifierRetiredKeyPurged: a day after its last slot a retired
// key is gone.
func TestDirectVerifierRetiredKeyPurged(t *testing.T) {
	t.Parallel()
	e := newDirectEnv(t)
	first, second := newCronKey(t, "a"), newCronKey(t, "b")
	e.provision(t, directJob, now, first.answer())
	*e.clock = now.Add(cronkeys.RetiredGrace + time.Minute)
	e.provision(t, directJob, now.Add(25*time.Hour), second.answer())
	if _, _, ok := e.keys.CronKey(context.Background(), directJob, first.id); ok {
		t.Fatal("retired key kept past its grace")
	}
}

// notReady is a NAS verifier whose keys never load.
type notReady struct{}

func (notReady) VerifyFire(context.Context, string, []byte, contract.FireRequest) error {
	return contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "not loaded")
}
func (notReady) WaitReady(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

// TestDirectVerifierNeedsNoJWKS: a direct token is verified while NAS's
// key set is not loaded (NAS may be down altogether); a NAS token waits.
func TestDirectVerifierNeedsNoJWKS(t *testing.T) {
	t.Parallel()
	keys, err := cronkeys.Open(t.TempDir(), cronkeys.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	k := newCronKey(t, "k")
	if err := keys.Provisioned(context.Background(), directJob, now, contract.DeliveryDirect, k.answer()); err != nil {
		t.Fatal(err)
	}
	v, err := fireauth.NewDirect(notReady{}, keys, fireauth.Config{Issuer: issuer, Audience: audience, Now: func() time.Time { return now }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	f := fireFor(directJob, now)
	token := sign(t, directToken(k, f))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := v.WaitReadyFor(ctx, token); err != nil {
		t.Fatalf("a direct token waited for NAS's keys: %v", err)
	}
	if err := v.VerifyFire(ctx, token, f.Body, f.Request); err != nil {
		t.Fatal(err)
	}
	nasTok, err := fireauthtest.Mint(mustKey(t, "ES256", "n"), fireFor(plainJob, now))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WaitReadyFor(ctx, nasTok); err == nil {
		t.Fatal("a NAS token did not wait for NAS's keys")
	}
}

// BenchmarkVerifyFireThroughDirect measures a NAS token through the direct
// verifier, against BenchmarkVerifyFire's ES256: telling the two kinds
// apart must cost next to nothing.
func BenchmarkVerifyFireThroughDirect(b *testing.B) {
	key, err := fireauthtest.NewKey("ES256", "k1")
	if err != nil {
		b.Fatal(err)
	}
	nas := staticVerifier(b, key)
	defer nas.Close()
	keys, err := cronkeys.Open(b.TempDir(), cronkeys.Options{})
	if err != nil {
		b.Fatal(err)
	}
	v, err := fireauth.NewDirect(nas, keys, fireauth.Config{Issuer: issuer, Audience: audience, Now: func() time.Time { return now }, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	f := newFire()
	token, err := fireauthtest.Mint(key, f)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := v.VerifyFire(ctx, token, f.Body, f.Request); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyDirectToken: a direct token under its job's key, as the
// dispatchers sign them (the lean path).
func BenchmarkVerifyDirectToken(b *testing.B) {
	key := mustKey(b, "ES256", "nas-1")
	nas := staticVerifier(b, key)
	defer nas.Close()
	keys, err := cronkeys.Open(b.TempDir(), cronkeys.Options{Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	v, err := fireauth.NewDirect(nas, keys, fireauth.Config{Issuer: issuer, Audience: audience, Now: func() time.Time { return now }, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	k := newCronKey(b, "bench")
	f := fireFor(directJob, now.Add(-time.Second))
	if err := keys.Provisioned(context.Background(), directJob, f.Request.FireAt.Time, contract.DeliveryDirect, k.answer()); err != nil {
		b.Fatal(err)
	}
	token, err := directToken(k, f).Sign()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := v.VerifyFire(ctx, token, f.Body, f.Request); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDirectVerifierReportsTheKeySetHealth: the direct verifier reports the
// NAS verifier's key set, so the agent's key-set metrics stay exported.
func TestDirectVerifierReportsTheKeySetHealth(t *testing.T) {
	t.Parallel()
	e := newDirectEnv(t)
	h := e.v.Health(context.Background())
	if !h.Loaded || h.Keys != 1 {
		t.Fatalf("health through the direct verifier %+v, want the NAS verifier's loaded key set", h)
	}
}
