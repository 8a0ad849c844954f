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
