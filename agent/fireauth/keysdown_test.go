package fireauth_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
)

// needKeys are the rejections only the key set can decide: without it, such
// a token may be good, so the fire is deferred (503), never refused.
var needKeys = map[string]bool{
	"signed by another key under the same kid": true,
	"kid unknown": true,
}

// TestBadTokensRefusedWhileKeysLoad pins that a token which fails a check
// the key set plays no part in (malformed, algorithm, headers, claims, body
// binding) is refused with 401 even before NAS's key set is loaded, and that
// only a token the keys could still accept is deferred with 503.
func TestBadTokensRefusedWhileKeysLoad(t *testing.T) {
	t.Parallel()
	k1 := mustKey(t, "EdDSA", "k1")
	srv := newJWKSServer(t, k1)
	srv.fail(http.StatusBadGateway)
	v, err := fireauth.New(context.Background(), remoteConfig(srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	for _, c := range fireauthtest.Rejections {
		t.Run(c.Name, func(t *testing.T) {
			f := newFire()
			token, body, err := c.Build(k1, f)
			if err != nil {
				t.Fatal(err)
			}
			got := v.VerifyFire(context.Background(), token, body, f.Request)
			want := http.StatusUnauthorized
			if needKeys[c.Name] {
				want = http.StatusServiceUnavailable
			}
			ce := wantStatus(t, got, want)
			if want == http.StatusUnauthorized && !strings.Contains(ce.Description, c.Reason) {
				t.Errorf("description %q does not name %q", ce.Description, c.Reason)
			}
		})
	}
	// A token only early waits for the keys too: once they decide, it is
	// 425, not refused.
	for _, c := range fireauthtest.NotYetValid {
		f := newFire()
		token, body, err := c.Build(k1, f)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, v.VerifyFire(context.Background(), token, body, f.Request), http.StatusServiceUnavailable)
	}
	f := newFire()
	good, err := fireauthtest.Mint(k1, f)
	if err != nil {
		t.Fatal(err)
	}
	ce := wantStatus(t, v.VerifyFire(context.Background(), good, f.Body, f.Request), http.StatusServiceUnavailable)
	if ce.RetryAfter <= 0 {
		t.Fatal("503 without a retry delay")
	}
}
