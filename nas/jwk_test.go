package nas_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"testing"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// handJWK is the JWK encoding NAS published before it used jwkset, kept as
// the reference: RFC 7518 (EC, RSA) and RFC 8037 (OKP) written out by hand.
func handJWK(k *nas.SigningKey) contract.JWK {
	b64 := base64.RawURLEncoding.EncodeToString
	j := contract.JWK{Kid: k.KID, Use: "sig", Alg: k.Alg}
	switch pub := k.Private.Public().(type) {
	case ed25519.PublicKey:
		j.Kty, j.Crv, j.X = "OKP", "Ed25519", b64(pub)
	case *ecdsa.PublicKey:
		ecdh, _ := pub.ECDH()
		raw := ecdh.Bytes()
		j.Kty, j.Crv, j.X, j.Y = "EC", "P-256", b64(raw[1:33]), b64(raw[33:65])
	case *rsa.PublicKey:
		j.Kty, j.N, j.E = "RSA", b64(pub.N.Bytes()), b64(big.NewInt(int64(pub.E)).Bytes())
	}
	return j
}

// TestJWKSIsByteForByteTheHandEncoding: the key set NAS serves, its members
// now encoded by jwkset, is byte for byte the JSON NAS served before, for
// every algorithm (many keys each, so short leading bytes of EC coordinates
// come up and must keep their fixed width).
func TestJWKSIsByteForByteTheHandEncoding(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgs {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			n := 64
			if alg == nas.AlgRS256 {
				n = 4
			}
			var keys []*nas.SigningKey
			want := contract.JWKS{}
			for range n {
				k, err := nas.GenerateKey(alg)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			set, err := nas.NewKeySet(keys, "", alg)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range set.Published {
				want.Keys = append(want.Keys, handJWK(k))
			}
			wantJSON, _ := json.Marshal(want)
			if string(set.JWKS()) != string(wantJSON) {
				t.Fatalf("JWKS\n%s\nwant\n%s", set.JWKS(), wantJSON)
			}
		})
	}
}
