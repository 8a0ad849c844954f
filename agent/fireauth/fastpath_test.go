package fireauth

// Benchmarks and differential fuzz tests of the fast paths of this package
// against their slow twins: the lean token path (parseLean) against
// golang-jwt's parser (parseToken), the plain claims decoder against
// encoding/json, and the lean direct-token path against golang-jwt's. Run the benchmarks with
//
//	go test -run '^$' -bench 'FastPath' -benchmem ./agent/fireauth/
//
// and each fuzz test with, for example,
//
//	go test -run '^$' -fuzz FuzzLeanParse -fuzztime 30s ./agent/fireauth/

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
)

// fastPathAlgs are the algorithms NAS signs fire tokens with.
var fastPathAlgs = []string{"ES256", "EdDSA", "RS256"}

// BenchmarkFastPathParseFire compares the lean path with golang-jwt's
// parser on a valid fire token as NAS writes it, per algorithm: "lean" is
// parse with the header cache warm (what VerifyFire runs), "golang-jwt" is
// parseToken alone.
func BenchmarkFastPathParseFire(b *testing.B) {
	ctx := context.Background()
	for _, alg := range fastPathAlgs {
		k, err := fireauthtest.NewKey(alg, "k1")
		if err != nil {
			b.Fatal(err)
		}
		v := leanVerifier(b, k)
		set := v.set.Load()
		token := signRaw(b, k, nasHeader(k), nasClaims(leanFire()))
		if _, err := v.parse(ctx, set, token); err != nil {
			b.Fatal(err)
		}
		b.Run(alg+"/lean", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.parse(ctx, set, token); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(alg+"/golang-jwt", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := v.parseToken(ctx, set, token, &contract.FireClaims{}, fireToken); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFastPathDecodeFireClaims compares the plain claims decoder with
// json.Unmarshal on the claims NAS writes.
func BenchmarkFastPathDecodeFireClaims(b *testing.B) {
	claims := []byte(nasClaims(leanFire()))
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c contract.FireClaims
			if !decodeFireClaims(claims, &c) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c contract.FireClaims
			if err := json.Unmarshal(claims, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// claimsOf returns empty claims of kind's type.
func claimsOf(kind tokenKind) jwt.Claims {
	if kind == reconcileToken {
		return &contract.ReconcileClaims{}
	}
	return &contract.FireClaims{}
}

// tamper edits a signed token as fuzz input mode says: 0 leaves it.
func tamper(token string, mode uint8) string {
	if len(token) == 0 {
		return token
	}
	switch mode % 6 {
	case 1: // flip one bit of the last byte of the signature
		b := []byte(token)
		b[len(b)-1] ^= 1
		return string(b)
	case 2:
		return token + ".x"
	case 3:
		return token[:strings.LastIndexByte(token, '.')]
	case 4:
		return token[:len(token)-min(4, len(token))]
	case 5:
		return token + "!"
	}
	return token
}

// leanFuzz is what FuzzLeanParse checks tokens with: a verifier over one
// key of each algorithm.
type leanFuzz struct {
	v    *JWTVerifier
	set  *keySet
	keys []*fireauthtest.Key
}

func newLeanFuzz(t testing.TB) *leanFuzz {
	t.Helper()
	var keys []*fireauthtest.Key
	for i, alg := range fastPathAlgs {
		k, err := fireauthtest.NewKey(alg, fmt.Sprintf("k%d", i+1))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	v := leanVerifier(t, keys...)
	return &leanFuzz{v: v, set: v.set.Load(), keys: keys}
}

// check fails unless the lean path, when it decides token, decides it as
// parseToken does (the same verdict and, for a token that verifies, the
// same claims), and parse (or parseReconcile) always agrees with
// parseToken.
func (lf *leanFuzz) check(t *testing.T, token string, kind tokenKind) {
	t.Helper()
	ctx := context.Background()
	want := claimsOf(kind)
	wantErr := lf.v.parseToken(ctx, lf.set, token, want, kind)
	if kind == fireToken {
		got := &contract.FireClaims{}
		if handled, err := lf.v.parseLean(lf.set, token, got); handled {
			sameVerdict(t, err, wantErr)
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("lean claims %+v, golang-jwt's %+v", got, want)
			}
		}
	}
	var (
		claims jwt.Claims
		err    error
	)
	if kind == reconcileToken {
		claims, err = lf.v.parseReconcile(ctx, lf.set, token)
	} else {
		claims, err = lf.v.parse(ctx, lf.set, token)
	}
	sameVerdict(t, err, wantErr)
	if err == nil && !reflect.DeepEqual(claims, want) {
		t.Fatalf("claims %+v, golang-jwt's %+v", claims, want)
	}
}

// FuzzLeanParse signs any header and claims JSON with a key of each
// algorithm, edits the token as mode says, and compares the lean path with
// golang-jwt's parser on it, as a fire token or a reconcile token.
func FuzzLeanParse(f *testing.F) {
	lf := newLeanFuzz(f)
	fire := leanFire()
	reconcile := fmt.Sprintf(`{"iss":%q,"aud":%q,"purpose":%q,"iat":%d,"nbf":%d,"exp":%d,"jti":"r1","bh":"x"}`,
		leanIssuer, leanAudience, contract.PurposeCronReconcile, leanNow.Unix(), leanNow.Unix(), leanNow.Add(time.Minute).Unix())
	for i, k := range lf.keys {
		for _, c := range rawCases {
			h, cl := nasHeader(k), nasClaims(fire)
			if c.header != nil {
				h = c.header(h)
			}
			if c.claims != nil {
				cl = c.claims(cl)
			}
			f.Add(h, cl, uint8(i), uint8(0), false)
		}
		for mode := range uint8(6) {
			f.Add(nasHeader(k), nasClaims(fire), uint8(i), mode, false)
		}
		rh := strings.Replace(nasHeader(k), contract.TokenTypeCronFire, contract.TokenTypeCronReconcile, 1)
		f.Add(rh, reconcile, uint8(i), uint8(0), true)
		f.Add(rh, strings.Replace(reconcile, `"exp":`, `"exp":1,"x":`, 1), uint8(i), uint8(0), true)
	}
	f.Fuzz(func(t *testing.T, header, claims string, key, mode uint8, asReconcile bool) {
		k := lf.keys[int(key)%len(lf.keys)]
		token := tamper(signRaw(t, k, header, claims), mode)
		kind := fireToken
		if asReconcile {
			kind = reconcileToken
		}
		lf.check(t, token, kind)
	})
}

// fakeCronKeys holds one cron key per job.
type fakeCronKeys map[string]struct {
	kid     string
	secret  []byte
	through time.Time
}

func (k fakeCronKeys) Direct(jobID string) bool { _, ok := k[jobID]; return ok }

func (k fakeCronKeys) CronKey(_ context.Context, jobID, kid string) ([]byte, time.Time, bool) {
	if e, ok := k[jobID]; ok && e.kid == kid {
		return e.secret, e.through, true
	}
	return nil, time.Time{}, false
}

// nopNAS stands in for the NAS verifier behind a DirectVerifier.
type nopNAS struct{}

func (nopNAS) VerifyFire(context.Context, string, []byte, contract.FireRequest) error {
	return errors.New("not a direct token")
}
func (nopNAS) WaitReady(context.Context) error { return nil }

// directKID is the cron key of leanFire's job in the direct tests here.
var directKID = contract.CronKeyIDPrefix + "k1"

// newFastDirect returns a direct verifier holding one cron key for the job
// of leanFire, and that key.
func newFastDirect(t testing.TB) (*DirectVerifier, []byte) {
	t.Helper()
	secret := make([]byte, contract.CronKeyBytes)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	keys := fakeCronKeys{leanFire().Request.JobID: {kid: directKID, secret: secret}}
	v, err := NewDirect(nopNAS{}, keys, Config{Issuer: leanIssuer, Audience: leanAudience,
		Now: func() time.Time { return leanNow }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return v, secret
}

// directHeader is the header of a direct token under kid, as
// relay/cronkey.Sign writes it.
func directHeader(kid string) string {
	return fmt.Sprintf(`{"alg":"HS256","kid":%q,"typ":%q}`, kid, contract.TokenTypeCronFire)
}

// signHS256 signs header and claims JSON with secret.
func signHS256(secret []byte, header, claims string) string {
	in := b64(header) + "." + b64(claims)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// slowDirect is verifyDirect's golang-jwt path up to the claims check: the
// token unverified for its kid and job_id, the key of that job, then
// golang-jwt's parser with that key. ok reports that it verified.
func slowDirect(v *DirectVerifier, ctx context.Context, token string, req contract.FireRequest) (claims *contract.FireClaims, kid string, through time.Time, ok bool) {
	unverified := &contract.FireClaims{}
	t, _, err := jwt.NewParser().ParseUnverified(token, unverified)
	if err != nil || t.Method.Alg() != contract.DirectTokenAlg {
		return nil, "", time.Time{}, false
	}
	kid, _ = t.Header["kid"].(string)
	if kid == "" || !strings.HasPrefix(kid, contract.CronKeyIDPrefix) {
		return nil, "", time.Time{}, false
	}
	if typ, _ := t.Header["typ"].(string); typ != contract.TokenTypeCronFire {
		return nil, "", time.Time{}, false
	}
	if unverified.JobID == "" || unverified.JobID != req.JobID {
		return nil, "", time.Time{}, false
	}
	secret, through, found := v.keys.CronKey(ctx, req.JobID, kid)
	if !found {
		return nil, "", time.Time{}, false
	}
	claims = &contract.FireClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return secret, nil }); err != nil {
		return nil, "", time.Time{}, false
	}
	return claims, kid, through, true
}

// BenchmarkFastPathDirect compares the lean path of direct tokens with
// golang-jwt's (slowDirect) on a valid direct token, header cache warm.
func BenchmarkFastPathDirect(b *testing.B) {
	ctx := context.Background()
	v, secret := newFastDirect(b)
	fire := leanFire()
	token := signHS256(secret, directHeader(directKID), nasClaims(fire))
	if _, _, _, ok := v.lean(ctx, token, fire.Request); !ok {
		b.Fatal("the lean path refuses a valid direct token")
	}
	b.Run("lean", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, _, ok := v.lean(ctx, token, fire.Request); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("golang-jwt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, _, ok := slowDirect(v, ctx, token, fire.Request); !ok {
				b.Fatal("refused")
			}
		}
	})
}

// FuzzLeanDirect signs any header and claims JSON with the job's cron key
// (or another), edits the token as mode says, and checks that a token the
// lean direct path takes is one golang-jwt's path takes too, with the same
// claims, kid and last slot. (A token the lean path leaves goes to
// golang-jwt's path, whose verdict stands.)
func FuzzLeanDirect(f *testing.F) {
	v, secret := newFastDirect(f)
	fire := leanFire()
	for _, c := range rawCases {
		h, cl := directHeader(directKID), nasClaims(fire)
		if c.header != nil {
			h = c.header(h)
		}
		if c.claims != nil {
			cl = c.claims(cl)
		}
		f.Add(h, cl, false, uint8(0))
	}
	for mode := range uint8(6) {
		f.Add(directHeader(directKID), nasClaims(fire), false, mode)
	}
	f.Add(directHeader(directKID), nasClaims(fire), true, uint8(0))
	f.Add(directHeader(contract.CronKeyIDPrefix+"other"), nasClaims(fire), false, uint8(0))
	other := make([]byte, len(secret))
	f.Fuzz(func(t *testing.T, header, claims string, otherKey bool, mode uint8) {
		key := secret
		if otherKey {
			key = other
		}
		token := tamper(signHS256(key, header, claims), mode)
		ctx := context.Background()
		got, kid, through, ok := v.lean(ctx, token, fire.Request)
		if !ok {
			return
		}
		want, wantKID, wantThrough, wantOK := slowDirect(v, ctx, token, fire.Request)
		if !wantOK {
			t.Fatalf("the lean path takes a token golang-jwt's refuses: %s", token)
		}
		if !reflect.DeepEqual(got, want) || kid != wantKID || !through.Equal(wantThrough) {
			t.Fatalf("lean %+v %s %v, golang-jwt's %+v %s %v", got, kid, through, want, wantKID, wantThrough)
		}
	})
}
