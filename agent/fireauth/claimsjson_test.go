package fireauth

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/contract"
)

// checkClaimsDecoding fails unless decodeFireClaims gives json.Unmarshal's
// result for b, and the plain decoder, when it takes b, gives it too.
func checkClaimsDecoding(t *testing.T, b []byte) {
	t.Helper()
	var want contract.FireClaims
	wantOK := json.Unmarshal(b, &want) == nil
	var got contract.FireClaims
	if ok := decodeFireClaims(b, &got); ok != wantOK {
		t.Fatalf("%q: decoded %v, json.Unmarshal %v", b, ok, wantOK)
	}
	if wantOK && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: claims %+v, json.Unmarshal's %+v", b, got, want)
	}
	var plain contract.FireClaims
	if decodePlainFireClaims(string(b), &plain) && (!wantOK || !reflect.DeepEqual(plain, want)) {
		t.Fatalf("%q: the plain decoder took it as %+v; json.Unmarshal %v, %+v", b, plain, wantOK, want)
	}
}

// claimsSamples are claims in and around the plain form.
var claimsSamples = []string{
	nasClaims(leanFire()),
	`{}`, ` { } `, `{"iss":"a"}`, `{"iss":"a",}`, `{"iss":"a""aud":"b"}`, `{"iss":"a" "aud":"b"}`, `{,"iss":"a"}`,
	`{"iss":"a"`, `{"iss":}`, `{"iss"}`, `{"iss":"a"}}`, `{"iss":"a"} x`, `{"iss":"a"}` + "\n\t ",
	`{"iss":"a","iss":"b"}`, `{"Iss":"a"}`, `{"ISS":"a","iss":"b"}`, `{"iss":"a\"b"}`, `{"iss":"a\\b"}`,
	`{"iss":"\u00e9"}`, "{\"iss\":\"\xff\"}", "{\"iss\":\"a\tb\"}", `{"iss":null}`, `{"iss":1}`, `{"iss":true}`,
	`{"iat":0}`, `{"iat":-0}`, `{"iat":-5}`, `{"iat":00}`, `{"iat":01}`, `{"iat":1.5}`, `{"iat":1e3}`, `{"iat":1E3}`,
	`{"iat":999999999999999}`, `{"iat":9999999999999999}`, `{"iat":18446744073709551616}`, `{"iat":"5"}`,
	`{"iat":null}`, `{"iat":5,"iat":6}`, `{"iat":5 ,"nbf":6,"exp":7}`, `{"iat":5x}`, `{"iat":}`,
	`{"attempt":0}`, `{"attempt":123456789}`, `{"attempt":1234567890}`, `{"attempt":-1}`, `{"attempt":1.0}`,
	`{"attempt":99999999999999999999}`, `{"attempt":"1"}`, `{"attempt":null}`,
	`{"extra":1}`, `{"sub":"x"}`, `{"aud":["a"]}`, `{"bh":"x","bh":"y"}`, `[]`, `null`, `"x"`, ``, ` `, `{`,
}

func TestDecodeFireClaimsMatchesJSON(t *testing.T) {
	t.Parallel()
	for _, s := range claimsSamples {
		checkClaimsDecoding(t, []byte(s))
	}
	if !decodePlainFireClaims(nasClaims(leanFire()), &contract.FireClaims{}) {
		t.Fatal("the plain decoder does not take the claims NAS writes")
	}
}

// TestDecodeFireClaimsMatchesJSONOnMutations mutates the claims NAS writes
// at random (a fixed seed, so a failure repeats) and compares with
// json.Unmarshal every time.
func TestDecodeFireClaimsMatchesJSONOnMutations(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(18, 1))
	pieces := []string{`"`, `\`, `{`, `}`, `[`, `]`, `,`, `:`, `0`, `7`, `.`, `e`, `-`, `+`, ` `, "\t", `n`, "\x00", "\x80", `é`,
		`null`, `"iss"`, `"ISS"`, `"iat"`, `"attempt"`, `"aud":"x",`, `1.5`, `\u0041`}
	base := nasClaims(leanFire())
	for range 20000 {
		s := base
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(s) + 1)
			switch rng.IntN(3) {
			case 0: // insert
				s = s[:i] + pieces[rng.IntN(len(pieces))] + s[i:]
			case 1: // delete a run
				j := min(len(s), i+1+rng.IntN(4))
				s = s[:min(i, j)] + s[j:]
			default: // duplicate a run
				j := min(len(s), i+rng.IntN(24))
				s = s[:j] + s[i:j] + s[j:]
			}
		}
		checkClaimsDecoding(t, []byte(s))
	}
}

// FuzzDecodeFireClaims compares decodeFireClaims with json.Unmarshal on any
// input (go test -fuzz FuzzDecodeFireClaims ./agent/fireauth/).
func FuzzDecodeFireClaims(f *testing.F) {
	for _, s := range claimsSamples {
		f.Add(s)
	}
	f.Add(strings.ReplaceAll(nasClaims(leanFire()), ",", " , "))
	f.Fuzz(func(t *testing.T, s string) {
		checkClaimsDecoding(t, []byte(s))
	})
}
