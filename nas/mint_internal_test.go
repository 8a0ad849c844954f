package nas

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"math/big"
	"strings"
	"testing"
	"time"
)

// TestES256RawSignature: the DER signatures crypto/ecdsa writes become JWS's
// r || s, each left-padded to 32 bytes, whatever their lengths (a short r or
// s, one with a leading zero byte); anything that is not such a signature is
// an error.
func TestES256RawSignature(t *testing.T) {
	t.Parallel()
	der := func(r, s *big.Int) []byte {
		b, err := asn1.Marshal(struct{ R, S *big.Int }{r, s})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rs := func(hexR, hexS string) (*big.Int, *big.Int) {
		r, _ := new(big.Int).SetString(hexR, 16)
		s, _ := new(big.Int).SetString(hexS, 16)
		return r, s
	}
	full := "ff" + string(bytes.Repeat([]byte("ee"), 31))
	for _, tc := range []struct{ name, r, s string }{
		{"both 32 bytes, high bit set (leading zero in DER)", full, full},
		{"short r", "01", full},
		{"short s", full, "7f"},
		{"31-byte r without high bit", string(bytes.Repeat([]byte("12"), 31)), "42"},
	} {
		r, s := rs(tc.r, tc.s)
		var sig [es256SigSize]byte
		if err := es256RawSignature(der(r, s), &sig); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := new(big.Int).SetBytes(sig[:32]); got.Cmp(r) != 0 {
			t.Errorf("%s: r = %x, want %x", tc.name, got, r)
		}
		if got := new(big.Int).SetBytes(sig[32:]); got.Cmp(s) != 0 {
			t.Errorf("%s: s = %x, want %x", tc.name, got, s)
		}
	}

	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256([]byte("input"))
	for range 50 {
		d, err := ecdsa.SignASN1(rand.Reader, priv, digest[:])
		if err != nil {
			t.Fatal(err)
		}
		var sig [es256SigSize]byte
		if err := es256RawSignature(d, &sig); err != nil {
			t.Fatal(err)
		}
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		if !ecdsa.Verify(&priv.PublicKey, digest[:], r, s) {
			t.Fatalf("r || s of %x does not verify", d)
		}
	}

	good := der(rs(full, "01"))
	tooLong := der(rs("01"+full, "01"))
	negative := []byte{0x30, 0x06, 0x02, 0x01, 0x80, 0x02, 0x01, 0x01}
	for name, b := range map[string][]byte{
		"empty":            nil,
		"not a sequence":   append([]byte{0x31}, good[1:]...),
		"length too long":  append([]byte{0x30, good[1] + 1}, good[2:]...),
		"trailing byte":    append(append([]byte{0x30, good[1] + 1}, good[2:]...), 0),
		"one integer":      {0x30, 0x03, 0x02, 0x01, 0x01},
		"not an integer":   {0x30, 0x06, 0x04, 0x01, 0x01, 0x02, 0x01, 0x01},
		"empty integer":    {0x30, 0x05, 0x02, 0x00, 0x02, 0x01, 0x01},
		"negative integer": negative,
		"33-byte value":    tooLong,
		"truncated":        good[:len(good)-1],
		"long-form length": {0x30, 0x81, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01},
	} {
		var sig [es256SigSize]byte
		if err := es256RawSignature(b, &sig); err == nil {
			t.Errorf("%s: %x accepted", name, b)
		}
	}
}

// TestMintES256Deterministic: an ES256 token's signature is RFC 6979's
// deterministic one: the same claims under the same key sign to the same
// token, other claims (another jti) to another, and each verifies.
func TestMintES256Deterministic(t *testing.T) {
	t.Parallel()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := &fireClaims{issuer: "https://nas.example", iat: time.Unix(1_800_000_000, 0), ttl: time.Minute,
		token: FireToken{InstanceID: "inst-1", Body: []byte(`{}`)}}
	c.jti[0] = 1
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","kid":"k1","typ":"cron-fire+jwt"}`))
	first, err := mintES256(header, priv, c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := mintES256(header, priv, c)
	if err != nil {
		t.Fatal(err)
	}
	if first != again {
		t.Fatalf("the same claims signed twice differ:\n%s\n%s", first, again)
	}
	c.jti[0] = 2
	other, err := mintES256(header, priv, c)
	if err != nil {
		t.Fatal(err)
	}
	if other == first {
		t.Fatal("another jti signed to the same token")
	}
	for _, tok := range []string{first, other} {
		i := strings.LastIndexByte(tok, '.')
		sig, err := base64.RawURLEncoding.DecodeString(tok[i+1:])
		if err != nil || len(sig) != es256SigSize {
			t.Fatalf("signature of %s: %v (%d bytes)", tok, err, len(sig))
		}
		digest := sha256.Sum256([]byte(tok[:i]))
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		if !ecdsa.Verify(&priv.PublicKey, digest[:], r, s) {
			t.Fatalf("%s does not verify", tok)
		}
	}
}
