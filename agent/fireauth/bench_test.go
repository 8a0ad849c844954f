package fireauth_test

import (
	"context"
	"testing"

	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
)

// BenchmarkVerifyFire measures one VerifyFire of a valid fire token, per
// signing algorithm (ES256 is NAS's default).
func BenchmarkVerifyFire(b *testing.B) {
	for _, alg := range []string{"ES256", "EdDSA", "RS256"} {
		b.Run(alg, func(b *testing.B) {
			key, err := fireauthtest.NewKey(alg, "k1")
			if err != nil {
				b.Fatal(err)
			}
			v := staticVerifier(b, key)
			defer v.Close()
			f := newFire()
			token, err := fireauthtest.Mint(key, f)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := v.VerifyFire(ctx, token, f.Body, f.Request); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
