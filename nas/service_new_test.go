package nas_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay/memory"
)

// TestNewRefusesBadSettings checks that New refuses a configuration it
// cannot honour, with an error naming the key, instead of dropping it.
func TestNewRefusesBadSettings(t *testing.T) {
	t.Parallel()
	secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
	for _, tc := range []struct {
		name string
		edit func(*nas.Config)
		want string
	}{
		{"cidr out of range", func(c *nas.Config) { c.CallbackAllowlist = []string{"10.0.0.0/8", "10.0.0.0/33"} }, "callback_allowlist"},
		{"not an address or host", func(c *nas.Config) { c.CallbackAllowlist = []string{"agents internal"} }, "callback_allowlist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eng := memory.New(memory.Options{})
			t.Cleanup(func() { _ = eng.Close() })
			ring, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
			if err != nil {
				t.Fatal(err)
			}
			agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i", TokenSHA256: nas.TokenSHA256("t")}})
			if err != nil {
				t.Fatal(err)
			}
			cfg := nas.Config{PublicURL: "https://nas.example.com", Relay: nas.RelayConfig{Secrets: []string{secret}}}
			tc.edit(&cfg)
			svc, err := nas.New(nas.Options{Config: cfg, Engine: eng, Verifier: agents, Keys: ring, Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				svc.Close()
				t.Fatalf("New accepted callback_allowlist %q", cfg.CallbackAllowlist)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

// TestNewRefusesKeysWithoutSigningKey checks that a key ring whose set has
// no active signing key is an error from New, not a panic in it.
func TestNewRefusesKeysWithoutSigningKey(t *testing.T) {
	t.Parallel()
	secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i", TokenSHA256: nas.TokenSHA256("t")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []string{"", nas.AlgEdDSA} {
		t.Run("signing_alg="+alg, func(t *testing.T) {
			t.Parallel()
			cfg := nas.Config{PublicURL: "https://nas.example.com", SigningAlg: alg, Relay: nas.RelayConfig{Secrets: []string{secret}}}
			var svc *nas.Service
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("New panicked: %v", r)
					}
				}()
				svc, err = nas.New(nas.Options{Config: cfg, Engine: eng, Verifier: agents,
					Keys: nas.NewKeyRing(&nas.KeySet{}), Logger: slog.New(slog.DiscardHandler)})
			}()
			if err == nil {
				svc.Close()
				t.Fatal("New accepted a key ring without a signing key")
			}
			if !strings.Contains(err.Error(), "signing key") {
				t.Fatalf("error %q does not say the signing key is missing", err)
			}
		})
	}
}
