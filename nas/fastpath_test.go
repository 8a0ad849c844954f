package nas

// Benchmarks and differential fuzz tests of the fast paths of the fire
// path against their slow twins: the hand-built fire token of Mint against
// golang-jwt's signing, and the reading of an agent's answer
// (ClassifyAnswer, through agentcall's scanner) against encoding/json. Run
// the benchmarks with
//
//	go test -run '^$' -bench 'FastPath' -benchmem ./nas/
//
// and each fuzz test with, for example,
//
//	go test -run '^$' -fuzz FuzzMintMatchesGolangJWT -fuzztime 30s ./nas/

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
)

// fastPathMintAlgs are the algorithms Mint builds tokens for by hand, and
// RS256, which it leaves to golang-jwt.
var fastPathMintAlgs = []string{AlgES256, AlgEdDSA, AlgRS256}

// fastPathFire is a fire as NAS delivers it.
func fastPathFire() FireToken {
	fire := contract.FireRequest{JobID: "ab12cd34", FireAt: contract.NewTime(time.Date(2026, 6, 18, 12, 35, 0, 0, time.UTC)),
		ScheduleID: "sch_1", Attempt: 1}
	body, err := json.Marshal(fire)
	if err != nil {
		panic(err)
	}
	return FireToken{InstanceID: "inst-1", Fire: fire, Body: body}
}

// mintGolangJWT is Mint's golang-jwt path, which it takes for any key it
// does not sign by hand: the same claims (a random jti), signed by
// golang-jwt.
func mintGolangJWT(m *Minter, now time.Time, f FireToken) (string, error) {
	key := m.Keys.Current().Active
	c := fireClaims{issuer: m.Issuer, iat: now.Truncate(time.Second), ttl: m.TTL, token: f}
	if _, err := rand.Read(c.jti[:]); err != nil {
		return "", err
	}
	tok := jwt.NewWithClaims(key.SigningMethod(), c.claims())
	tok.Header["kid"] = key.KID
	tok.Header["typ"] = contract.TokenTypeCronFire
	return tok.SignedString(key.Private)
}

// BenchmarkFastPathMint compares Mint ("hand-built" for ES256 and EdDSA;
// RS256 goes to golang-jwt in both) with golang-jwt's signing of the same
// claims, per algorithm.
func BenchmarkFastPathMint(b *testing.B) {
	f := fastPathFire()
	now := time.Now()
	for _, alg := range fastPathMintAlgs {
		ring, err := NewEphemeralKeyRing(alg)
		if err != nil {
			b.Fatal(err)
		}
		m := &Minter{Keys: ring, Issuer: "https://nas.example", TTL: 90 * time.Second}
		b.Run(alg+"/hand-built", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Mint(now, f); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(alg+"/golang-jwt", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := mintGolangJWT(m, now, f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFastPathMintSigningInput compares the encoding alone: the
// hand-built signing input (header and claims) with golang-jwt's
// SigningString of the same claims.
func BenchmarkFastPathMintSigningInput(b *testing.B) {
	ring, err := NewEphemeralKeyRing(AlgES256)
	if err != nil {
		b.Fatal(err)
	}
	key := ring.Current().Active
	m := &Minter{Keys: ring}
	c := &fireClaims{issuer: "https://nas.example", iat: time.Now().Truncate(time.Second), ttl: 90 * time.Second, token: fastPathFire()}
	b.Run("hand-built", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var cb [claimsScratch]byte
			var ib [inputScratch]byte
			_ = appendSigningInput(ib[:0], m.headerSegment(key), c.appendJSON(cb[:0]))
		}
	})
	b.Run("golang-jwt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tok := jwt.NewWithClaims(key.SigningMethod(), c.claims())
			tok.Header["kid"] = key.KID
			tok.Header["typ"] = contract.TokenTypeCronFire
			if _, err := tok.SigningString(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzMintMatchesGolangJWT builds the fire token of any claims by hand,
// per algorithm NAS signs by hand, and checks it against golang-jwt: the
// same signing input (header and claims byte for byte) as SigningString of
// the same claims, and a signature golang-jwt verifies with the key.
func FuzzMintMatchesGolangJWT(f *testing.F) {
	var keys []*SigningKey
	for _, alg := range []string{AlgES256, AlgEdDSA} {
		ring, err := NewEphemeralKeyRing(alg)
		if err != nil {
			f.Fatal(err)
		}
		keys = append(keys, ring.Current().Active)
	}
	fire := fastPathFire()
	at := fire.Fire.FireAt.Time
	for i := range keys {
		f.Add(uint8(i), "https://nas.example", fire.InstanceID, fire.Fire.JobID, fire.Fire.ScheduleID, at.Unix(), int64(0), "",
			int64(fire.Fire.Attempt), fire.Body, at.Unix(), uint16(90), "k1")
		f.Add(uint8(i), "https://nas.test/é", "in\"st<é>", "job<&>\n\u2028", "sch-\u00e9", at.Unix(), int64(500_000_000),
			"2026-06-18T14:35:00.5+02:00", int64(1)<<40, []byte(`{}`), int64(1), uint16(60), "kid\"\\")
		f.Add(uint8(i), "", "", "", "", int64(0), int64(0), "", int64(-1), []byte(nil), int64(-5), uint16(0), "")
		f.Add(uint8(i), "\xff", "\xfe\x00", "a\u007fb", "\ufffd", int64(253402300799), int64(999_999_999), "9999-12-31T23:59:59.999999999Z",
			int64(0), []byte("\xff"), int64(253402300799), uint16(120), "\t")
	}
	f.Fuzz(func(t *testing.T, keyIndex uint8, issuer, instance, jobID, scheduleID string, fireAtSec, fireAtNano int64, spelling string,
		attempt int64, body []byte, iatSec int64, ttlSec uint16, kid string) {
		// Instants NAS can meet: years 0 to 9999 (RFC 3339's four digits).
		const maxSec = 253402300799 // 9999-12-31T23:59:59Z
		const minSec = -62167219200 // 0000-01-01T00:00:00Z
		if fireAtSec < minSec || fireAtSec > maxSec || iatSec < minSec || iatSec+int64(ttlSec) > maxSec {
			t.Skip()
		}
		key := *keys[int(keyIndex)%len(keys)]
		key.KID = kid
		fireAt := time.Unix(fireAtSec, fireAtNano%1_000_000_000).UTC()
		c := &fireClaims{issuer: issuer, iat: time.Unix(iatSec, 0), ttl: time.Duration(ttlSec) * time.Second, token: FireToken{
			InstanceID: instance,
			Fire: contract.FireRequest{JobID: jobID, FireAt: contract.NewTimeSpelled(fireAt, spelling),
				ScheduleID: scheduleID, Attempt: int(attempt)},
			Body: body,
		}}
		copy(c.jti[:], body)
		header := encodeHeader(key.Alg, key.KID)
		var (
			token string
			err   error
		)
		switch key.Alg {
		case AlgEdDSA:
			token = mintEdDSA(header, key.Private.(ed25519.PrivateKey), c)
		default:
			token, err = mintES256(header, key.Private.(*ecdsa.PrivateKey), c)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := jwt.NewWithClaims(key.SigningMethod(), c.claims())
		want.Header["kid"] = key.KID
		want.Header["typ"] = contract.TokenTypeCronFire
		input, err := want.SigningString()
		if err != nil {
			t.Fatal(err)
		}
		dot := strings.LastIndexByte(token, '.')
		if dot < 0 || token[:dot] != input {
			t.Fatalf("signing input\n got  %s\n want %s", token[:max(dot, 0)], input)
		}
		sig, err := jwt.NewParser().DecodeSegment(token[dot+1:])
		if err != nil {
			t.Fatal(err)
		}
		if err := key.SigningMethod().Verify(input, sig, key.Private.Public()); err != nil {
			t.Fatalf("golang-jwt does not verify the signature: %v", err)
		}
	})
}

// classifyAnswerJSON is ClassifyAnswer of a 2xx answer with encoding/json
// alone reading the body: the slow twin of agentcall's scanner.
func classifyAnswerJSON(status int, body []byte) agentcall.FireResult {
	var fr struct {
		Status string `json:"status"`
		RunID  string `json:"run_id"`
	}
	_ = json.Unmarshal(body, &fr)
	cut := func(s string, n int) string { return s[:min(len(s), n)] }
	return agentcall.FireResult{HTTPStatus: status, Outcome: agentcall.OutcomeDelivered, AgentStatus: cut(fr.Status, 64), RunID: cut(fr.RunID, 128)}
}

// fastPathAnswers are agents' answers to a fire: the shapes agents send
// and bodies that leave them.
var fastPathAnswers = []string{
	`{"status":"accepted","job_id":"ab12cd34","run_id":"r-01J2ZK4M3N5P6Q7R8S9T0V1W2X"}` + "\n",
	`{"status":"duplicate","job_id":"j"}`,
	` { "status" : "gone" } `,
	`{"Status":"x","RUN_ID":"y","status":"z"}`,
	`{"status":"caf` + "\u00e9" + `"}`,
	`{"status":"a\u0062"}`,
	`{"status":5}`,
	`{"status":"a",}`,
	`{"status":"a"} x`,
	`{"ſtatus":"x"}`,
	`{"run_id":"` + strings.Repeat("r", 200) + `"}`,
	``, `null`, `[]`, `{}`, "{\"status\":\"\xff\"}",
}

// BenchmarkFastPathClassifyAnswer compares ClassifyAnswer on an agent's
// usual answer with the same done by encoding/json.
func BenchmarkFastPathClassifyAnswer(b *testing.B) {
	body := []byte(fastPathAnswers[0])
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := ClassifyAnswer(202, "", body); r.RunID == "" {
				b.Fatal("no run_id")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := classifyAnswerJSON(202, body); r.RunID == "" {
				b.Fatal("no run_id")
			}
		}
	})
}

// FuzzClassifyAnswerMatchesJSON compares ClassifyAnswer of a delivered
// answer with encoding/json's reading of any body.
func FuzzClassifyAnswerMatchesJSON(f *testing.F) {
	for _, s := range fastPathAnswers {
		f.Add(uint8(2), []byte(s))
	}
	f.Fuzz(func(t *testing.T, status uint8, body []byte) {
		code := 200 + int(status)%100
		got, want := ClassifyAnswer(code, "", body), classifyAnswerJSON(code, body)
		if got != want {
			t.Fatalf("%q: %+v, encoding/json reads %+v", body, got, want)
		}
		if !utf8.Valid(body) {
			return
		}
		// The same answer with its strings escaped reads alike.
		esc := []byte(strings.ReplaceAll(string(body), "a", `\u0061`))
		if got, want := ClassifyAnswer(code, "", esc), classifyAnswerJSON(code, esc); got != want {
			t.Fatalf("%q: %+v, encoding/json reads %+v", esc, got, want)
		}
	})
}
