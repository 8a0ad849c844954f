package fireauth_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
)

func newReconcile() fireauthtest.Fire {
	return fireauthtest.NewReconcile(issuer, audience, now, "inst-1")
}

func TestVerifyReconcileAccepts(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"EdDSA", "ES256", "RS256"} {
		key := mustKey(t, alg, "k1")
		v := staticVerifier(t, key)
		r := newReconcile()
		token, err := fireauthtest.MintReconcile(key, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.VerifyReconcile(context.Background(), token, r.Body); err != nil {
			t.Fatalf("%s: VerifyReconcile: %v", alg, err)
		}
	}
}

// Every way a token can be wrong is refused at the reconcile route as at the
// fire route; and neither route takes the other's token.
func TestVerifyReconcileRejects(t *testing.T) {
	t.Parallel()
	key := mustKey(t, "ES256", "k1")
	v := staticVerifier(t, key)
	if len(fireauthtest.ReconcileRejections) < 25 {
		t.Fatalf("only %d rejection cases apply to reconcile tokens", len(fireauthtest.ReconcileRejections))
	}
	for _, c := range fireauthtest.ReconcileRejections {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			token, body, err := c.BuildReconcile(key, newReconcile())
			if err != nil {
				t.Fatal(err)
			}
			ce := wantStatus(t, v.VerifyReconcile(context.Background(), token, body), http.StatusUnauthorized)
			if ce.Code != contract.CodeInvalidToken || !strings.Contains(ce.Description, "reconcile token rejected") {
				t.Fatalf("error %+v", ce)
			}
			want := strings.ReplaceAll(c.Reason, contract.TokenTypeCronFire, contract.TokenTypeCronReconcile)
			if !strings.Contains(ce.Description, want) {
				t.Fatalf("description %q does not name the cause %q", ce.Description, want)
			}
		})
	}
	t.Run("a fire token at the reconcile route", func(t *testing.T) {
		t.Parallel()
		f := newFire()
		token, err := fireauthtest.Mint(key, f)
		if err != nil {
			t.Fatal(err)
		}
		ce := wantStatus(t, v.VerifyReconcile(context.Background(), token, f.Body), http.StatusUnauthorized)
		if !strings.Contains(ce.Description, "typ header is not "+contract.TokenTypeCronReconcile) {
			t.Fatalf("description %q", ce.Description)
		}
	})
	t.Run("a reconcile token at the fire route", func(t *testing.T) {
		t.Parallel()
		r := newReconcile()
		token, err := fireauthtest.MintReconcile(key, r)
		if err != nil {
			t.Fatal(err)
		}
		var req contract.FireRequest
		ce := wantStatus(t, v.VerifyFire(context.Background(), token, r.Body, req), http.StatusUnauthorized)
		if !strings.Contains(ce.Description, "typ header is not "+contract.TokenTypeCronFire) {
			t.Fatalf("description %q", ce.Description)
		}
	})
	t.Run("reconcile typ with the fire purpose", func(t *testing.T) {
		t.Parallel()
		r := newReconcile()
		tk := fireauthtest.NewReconcileToken(key, r)
		tk.Claims["purpose"] = contract.PurposeCronFire
		token, err := tk.Sign()
		if err != nil {
			t.Fatal(err)
		}
		ce := wantStatus(t, v.VerifyReconcile(context.Background(), token, r.Body), http.StatusUnauthorized)
		if !strings.Contains(ce.Description, "purpose is not "+contract.PurposeCronReconcile) {
			t.Fatalf("description %q", ce.Description)
		}
	})
}

// While the key set is not loaded, a token that passes every check but the
// signature is deferred (503), and one that fails another check is refused.
func TestVerifyReconcileBeforeTheKeysLoad(t *testing.T) {
	t.Parallel()
	k1 := mustKey(t, "EdDSA", "k1")
	srv := newJWKSServer(t, k1)
	srv.fail(http.StatusBadGateway)
	v, err := fireauth.New(context.Background(), remoteConfig(srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	r := newReconcile()
	token, err := fireauthtest.MintReconcile(k1, r)
	if err != nil {
		t.Fatal(err)
	}
	if ce := wantStatus(t, v.VerifyReconcile(context.Background(), token, r.Body), http.StatusServiceUnavailable); ce.RetryAfter <= 0 {
		t.Fatal("503 without a retry delay")
	}
	f := newFire()
	fireToken, err := fireauthtest.Mint(k1, f)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, v.VerifyReconcile(context.Background(), fireToken, f.Body), http.StatusUnauthorized)
	srv.set(t, k1)
	waitReady(t, v)
	if err := v.VerifyReconcile(context.Background(), token, r.Body); err != nil {
		t.Fatalf("after the keys loaded: %v", err)
	}
}
