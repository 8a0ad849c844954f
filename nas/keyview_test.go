package nas_test

import (
	"strings"
	"testing"

	"github.com/chronoscron/chronos/nas"
)

// TestKeysSayWhichSigns: Keys lists every published key and marks the
// active one signing; WriteKeyTable lays them out under a header.
func TestKeysSayWhichSigns(t *testing.T) {
	t.Parallel()
	a := &nas.SigningKey{KID: "a", Alg: nas.AlgES256}
	b := &nas.SigningKey{KID: "b", Alg: nas.AlgEdDSA}
	keys := (&nas.KeySet{Active: b, Published: []*nas.SigningKey{a, b}}).Keys()
	if len(keys) != 2 || keys[0] != (nas.KeyInfo{KID: "a", Alg: "ES256", State: "published"}) || keys[1].State != "signing" {
		t.Fatalf("Keys = %+v", keys)
	}
	var w strings.Builder
	if err := nas.WriteKeyTable(&w, keys); err != nil || w.String() != "KID  ALG    STATE\na    ES256  published\nb    EdDSA  signing\n" {
		t.Fatalf("table %q %v", w.String(), err)
	}
}
