package fireauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
)

const (
	leanIssuer   = "https://nas.example"
	leanAudience = "agent:inst-1"
)

var leanNow = time.Date(2026, 6, 18, 12, 34, 56, 0, time.UTC)

func leanFire() fireauthtest.Fire {
	req := contract.FireRequest{JobID: "ab12cd34", FireAt: contract.NewTime(leanNow), ScheduleID: "sch_1", Attempt: 1}
	return fireauthtest.NewFire(leanIssuer, leanAudience, leanNow, req)
}

func leanVerifier(t testing.TB, keys ...*fireauthtest.Key) *JWTVerifier {
	t.Helper()
	jwks, err := fireauthtest.JWKS(keys...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewStatic(jwks, Config{Issuer: leanIssuer, Audience: leanAudience, Now: func() time.Time { return leanNow }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// signRaw signs the exact header and claims JSON given with k, so tests can
// send tokens no claims map can produce (repeated or escaped members, other
// spellings, odd numbers).
func signRaw(t testing.TB, k *fireauthtest.Key, header, claims string) string {
	t.Helper()
	in := b64(header) + "." + b64(claims)
	sig, err := k.Method.Sign(in, k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// nasHeader and nasClaims are a fire token's header and claims as NAS
// writes them, for k and f.
func nasHeader(k *fireauthtest.Key) string {
	return fmt.Sprintf(`{"alg":%q,"kid":%q,"typ":%q}`, k.Method.Alg(), k.Kid, contract.TokenTypeCronFire)
}

func nasClaims(f fireauthtest.Fire) string {
	return fmt.Sprintf(`{"iss":%q,"aud":%q,"purpose":%q,"iat":%d,"nbf":%d,"exp":%d,"jti":"j1","job_id":%q,"fire_at":%q,"schedule_id":%q,"attempt":%d,"bh":%q}`,
		f.Issuer, f.Audience, contract.PurposeCronFire, f.Now.Unix(), f.Now.Unix(), f.Now.Add(time.Minute).Unix(),
		f.Request.JobID, f.Request.FireAt.Text(), f.Request.ScheduleID, f.Request.Attempt, contract.BodyHash(f.Body))
}

// rawCase is a token built from edited NAS header and claims JSON.
type rawCase struct {
	name   string
	header func(h string) string
	claims func(c string) string
	token  func(tok string) string // edits the signed token
}

func replace(old, new string) func(string) string {
	return func(s string) string { return strings.Replace(s, old, new, 1) }
}

// rawCases are tokens of unusual spelling: valid ones the lean path must
// still accept as golang-jwt does, and bad ones it must refuse alike.
var rawCases = []rawCase{
	{name: "as NAS writes it"},
	{name: "claims with whitespace", claims: func(c string) string {
		return " \n{ " + strings.ReplaceAll(strings.ReplaceAll(c[1:], ",", " ,\t"), ":", " : ") + "\r\n"
	}},
	{name: "aud written with an escape", claims: replace(`"aud":"agent`, `"aud":"\u0061gent`)},
	{name: "aud twice, the last right", claims: replace(`"aud":`, `"aud":"agent:other","aud":`)},
	{name: "aud twice, the last wrong", claims: replace(`"bh":`, `"aud":"agent:other","bh":`)},
	{name: "AUD in capitals", claims: replace(`"aud":`, `"AUD":`)},
	{name: "an extra claim", claims: replace(`"jti":`, `"extra":{"a":[1,2]},"jti":`)},
	{name: "non-ASCII jti", claims: replace(`"jti":"j1"`, `"jti":"j\u00e9-é"`)},
	{name: "exp as a fraction", claims: func(c string) string {
		return strings.Replace(c, fmt.Sprintf(`"exp":%d`, leanNow.Add(time.Minute).Unix()), fmt.Sprintf(`"exp":%d.75`, leanNow.Add(time.Minute).Unix()), 1)
	}},
	{name: "exp with an exponent", claims: func(c string) string {
		return strings.Replace(c, fmt.Sprintf(`"exp":%d`, leanNow.Add(time.Minute).Unix()), `"exp":1.7817e9`, 1)
	}},
	{name: "iat null", claims: replace(`"iat":`, `"iat":null,"x":`)},
	{name: "attempt as a fraction", claims: replace(`"attempt":1`, `"attempt":1.0`)},
	{name: "attempt with a leading zero", claims: replace(`"attempt":1`, `"attempt":01`)},
	{name: "attempt negative", claims: replace(`"attempt":1`, `"attempt":-1`)},
	{name: "attempt as a string", claims: replace(`"attempt":1`, `"attempt":"1"`)},
	{name: "job_id a number", claims: replace(`"job_id":"ab12cd34"`, `"job_id":7`)},
	{name: "claims an array", claims: func(string) string { return `[1]` }},
	{name: "claims null", claims: func(string) string { return `null` }},
	{name: "claims followed by more JSON", claims: func(c string) string { return c + `{}` }},
	{name: "claims cut short", claims: func(c string) string { return c[:len(c)-1] }},
	{name: "header KID in capitals", header: replace(`"kid"`, `"KID"`)},
	{name: "header kid a number", header: replace(`"kid":"k1"`, `"kid":1`)},
	{name: "header with an extra member", header: replace(`{`, `{"cty":"x",`)},
	{name: "header typ JWT", header: replace(contract.TokenTypeCronFire, "JWT")},
	{name: "header alg none", header: func(string) string { return `{"alg":"none","kid":"k1","typ":"cron-fire+jwt"}` }},
	{name: "header alg HS256", header: func(h string) string { return replace(`"alg":"`+algOf(h)+`"`, `"alg":"HS256"`)(h) }},
	{name: "header alg unknown", header: func(h string) string { return replace(`"alg":"`+algOf(h)+`"`, `"alg":"XX1"`)(h) }},
	{name: "header not JSON", header: func(string) string { return `{"alg"` }},
	{name: "header unknown kid", header: replace(`"kid":"k1"`, `"kid":"no-such-kid"`)},
	{name: "four segments", token: func(tok string) string { return tok + ".x" }},
	{name: "two segments", token: func(tok string) string { return tok[:strings.LastIndexByte(tok, '.')] }},
	{name: "signature not base64", token: func(tok string) string { return tok + "!" }},
	{name: "signature cut short", token: func(tok string) string { return tok[:len(tok)-4] }},
	{name: "signature empty", token: func(tok string) string { return tok[:strings.LastIndexByte(tok, '.')+1] }},
	{name: "claims altered after signing", token: func(tok string) string {
		parts := strings.Split(tok, ".")
		parts[1] = b64(strings.Replace(mustB64(parts[1]), `"attempt":1`, `"attempt":2`, 1))
		return strings.Join(parts, ".")
	}},
}

func algOf(header string) string {
	_, rest, _ := strings.Cut(header, `"alg":"`)
	alg, _, _ := strings.Cut(rest, `"`)
	return alg
}

func mustB64(s string) string {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (c rawCase) build(t testing.TB, k *fireauthtest.Key, f fireauthtest.Fire) string {
	h, cl := nasHeader(k), nasClaims(f)
	if c.header != nil {
		h = c.header(h)
	}
	if c.claims != nil {
		cl = c.claims(cl)
	}
	tok := signRaw(t, k, h, cl)
	if c.token != nil {
		tok = c.token(tok)
	}
	return tok
}

// verdictKinds are the errors parseToken's callers tell apart.
var verdictKinds = []error{
	errNoKID, errBadTyp, errUnknownKID, jwt.ErrTokenMalformed, jwt.ErrTokenSignatureInvalid, jwt.ErrTokenUnverifiable,
	jwt.ErrTokenRequiredClaimMissing, jwt.ErrTokenExpired, jwt.ErrTokenNotValidYet, jwt.ErrTokenUsedBeforeIssued,
	jwt.ErrTokenInvalidAudience, jwt.ErrTokenInvalidIssuer, jwt.ErrTokenInvalidClaims,
}

// sameVerdict fails unless got and want are the same verdict: both nil, or
// errors of the same kinds with the same reason.
func sameVerdict(t *testing.T, got, want error) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("verdict %v, golang-jwt's %v", got, want)
	}
	if got == nil {
		return
	}
	if parseReason(got) != parseReason(want) {
		t.Fatalf("reason %q (%v), golang-jwt's %q (%v)", parseReason(got), got, parseReason(want), want)
	}
	for _, kind := range verdictKinds {
		if errors.Is(got, kind) != errors.Is(want, kind) {
			t.Fatalf("%v: errors.Is(%v) = %v, golang-jwt's %v (%v)", got, kind, errors.Is(got, kind), !errors.Is(got, kind), want)
		}
	}
}

// leanDecides are the cases the lean path must decide itself (the others it
// may leave to golang-jwt): valid tokens, forged signatures and claims that
// fail golang-jwt's validation.
var leanDecides = map[string]bool{
	"as NAS writes it": true, "claims with whitespace": true, "aud written with an escape": true,
	"aud twice, the last right": true, "aud twice, the last wrong": true, "AUD in capitals": true,
	"an extra claim": true, "non-ASCII jti": true, "exp as a fraction": true, "iat null": true,
	"header with an extra member": true, "claims altered after signing": true, "signature cut short": true,
	"signed by another key under the same kid": true, "aud wrong": true, "aud missing": true,
	"iss wrong": true, "iss missing": true, "exp missing": true, "expired beyond the leeway": true,
	"nbf beyond the leeway": true, "iat in the future beyond the leeway": true,
}

// leanCase is one token for TestLeanPathMatchesGolangJWT.
type leanCase struct {
	name  string
	token string
}

func leanCases(t *testing.T, k *fireauthtest.Key, f fireauthtest.Fire) []leanCase {
	var cases []leanCase
	for _, c := range slices.Concat(fireauthtest.Rejections, fireauthtest.NotYetValid) {
		token, _, err := c.Build(k, f)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, leanCase{c.Name, token})
	}
	for _, c := range rawCases {
		cases = append(cases, leanCase{c.name, c.build(t, k, f)})
	}
	return cases
}

// TestLeanPathMatchesGolangJWT feeds every bad token of the shared table
// (malformed, forged, expired, wrong aud, wrong or none alg, unknown kid,
// ...) and tokens of unusual spelling to the lean path and to golang-jwt's
// parser, per algorithm, with the header cache cold and warm: whatever the
// lean path decides, it decides as golang-jwt does (same verdict, same
// claims), and parse, which falls back on golang-jwt, always agrees.
func TestLeanPathMatchesGolangJWT(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"ES256", "EdDSA", "RS256"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			k, err := fireauthtest.NewKey(alg, "k1")
			if err != nil {
				t.Fatal(err)
			}
			v := leanVerifier(t, k)
			set := v.set.Load()
			f := leanFire()
			cases := leanCases(t, k, f)
			for _, cache := range []string{"cold", "warm"} {
				for _, c := range cases {
					t.Run(cache+"/"+c.name, func(t *testing.T) {
						checkLeanCase(t, v, set, c)
					})
				}
				if _, err := v.parse(context.Background(), set, rawCases[0].build(t, k, f)); err != nil {
					t.Fatalf("a valid token: %v", err)
				}
				if _, ok := v.headers.get(b64(nasHeader(k))); !ok {
					t.Fatal("the header of a verified token is not cached")
				}
			}
		})
	}
}

func checkLeanCase(t *testing.T, v *JWTVerifier, set *keySet, c leanCase) {
	t.Helper()
	ctx := context.Background()
	want := &contract.FireClaims{}
	wantErr := v.parseToken(ctx, set, c.token, want, fireToken)
	got := &contract.FireClaims{}
	handled, err := v.parseLean(set, c.token, got)
	if leanDecides[c.name] && !handled {
		t.Fatalf("the lean path left the token to golang-jwt (which says %v)", wantErr)
	}
	if handled {
		sameVerdict(t, err, wantErr)
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("claims %+v, golang-jwt's %+v", got, want)
		}
	}
	claims, err := v.parse(ctx, set, c.token)
	sameVerdict(t, err, wantErr)
	if err == nil && !reflect.DeepEqual(claims, want) {
		t.Fatalf("parse's claims %+v, golang-jwt's %+v", claims, want)
	}
}

// TestLeanReconcileMatchesGolangJWT does the same for reconcile tokens,
// whose claims the lean path decodes with encoding/json.
func TestLeanReconcileMatchesGolangJWT(t *testing.T) {
	t.Parallel()
	k, err := fireauthtest.NewKey("ES256", "k1")
	if err != nil {
		t.Fatal(err)
	}
	v := leanVerifier(t, k)
	set := v.set.Load()
	r := fireauthtest.NewReconcile(leanIssuer, leanAudience, leanNow, "inst-1")
	fire, err := fireauthtest.Mint(k, leanFire())
	if err != nil {
		t.Fatal(err)
	}
	cases := []leanCase{{"a fire token", fire}}
	for _, c := range fireauthtest.ReconcileRejections {
		token, _, err := c.BuildReconcile(k, r)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, leanCase{c.Name, token})
	}
	good, err := fireauthtest.MintReconcile(k, r)
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, leanCase{"valid", good})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := &contract.ReconcileClaims{}
			wantErr := v.parseToken(context.Background(), set, c.token, want, reconcileToken)
			got, err := v.parseReconcile(context.Background(), set, c.token)
			sameVerdict(t, err, wantErr)
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("claims %+v, golang-jwt's %+v", got, want)
			}
		})
	}
}

// TestHeaderCacheHoldsOnlyVerifiedHeaders pins that tokens which do not
// verify (forged, unknown kid, bad claims) add nothing to the header cache,
// and that the cache stays bounded.
func TestHeaderCacheHoldsOnlyVerifiedHeaders(t *testing.T) {
	t.Parallel()
	k, err := fireauthtest.NewKey("ES256", "k1")
	if err != nil {
		t.Fatal(err)
	}
	forger, err := fireauthtest.NewKey("ES256", "k1")
	if err != nil {
		t.Fatal(err)
	}
	v := leanVerifier(t, k)
	f := leanFire()
	for i := range 100 {
		h := replace(`{`, fmt.Sprintf(`{"n":%d,`, i))(nasHeader(k))
		forged := signRaw(t, forger, h, nasClaims(f))
		expired := signRaw(t, k, h, replace(`"exp":`, `"exp":1,"x":`)(nasClaims(f)))
		for _, tok := range []string{forged, expired} {
			if err := v.VerifyFire(context.Background(), tok, f.Body, f.Request); err == nil {
				t.Fatal("a bad token verified")
			}
		}
	}
	if m := v.headers.m.Load(); m != nil {
		t.Fatalf("%d headers cached from tokens that failed", len(*m))
	}
	for i := range 2 * maxCachedHeaders {
		h := replace(`{`, fmt.Sprintf(`{"n":%d,`, i))(nasHeader(k))
		if err := v.VerifyFire(context.Background(), signRaw(t, k, h, nasClaims(f)), f.Body, f.Request); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(*v.headers.m.Load()); n != maxCachedHeaders {
		t.Fatalf("%d headers cached, want the bound %d", n, maxCachedHeaders)
	}
}

func TestBodyHashMatches(t *testing.T) {
	t.Parallel()
	body := []byte(`{"job_id":"a"}`)
	bh := contract.BodyHash(body)
	tests := []struct {
		name string
		bh   string
		want bool
	}{
		{"the hash", bh, true},
		{"empty", "", false},
		{"one byte short", bh[:len(bh)-1], false},
		{"one byte more", bh + "A", false},
		{"padded", bh + "=", false},
		{"last byte changed", bh[:len(bh)-1] + "x", false},
		{"of another body", contract.BodyHash([]byte(`{}`)), false},
	}
	for _, tt := range tests {
		if got := bodyHashMatches(tt.bh, body); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if len(bh) != bodyHashLen {
		t.Fatalf("bodyHashLen %d, BodyHash gives %d", bodyHashLen, len(bh))
	}
}
