package provider_test

import (
	"fmt"

	"github.com/chronoscron/chronos/agent/provider"
)

// A config that asks for the chronos provider but lacks a setting falls back
// to the built-in timer and says why.
func ExampleDecide() {
	cfg, err := provider.ParseConfig([]byte(`
home: /var/lib/chronos
cron:
  provider: chronos
  chronos:
    portal_url: https://nas.example.com
    expected_audience: agent:inst-17
    nas_jwks_url: https://nas.example.com/.well-known/jwks.json
`))
	if err != nil {
		panic(err)
	}
	cfg.Cron.Chronos.AccessToken = "token from CHRONOS_ACCESS_TOKEN"
	d := provider.Decide(cfg)
	fmt.Println(d.Provider)
	for _, r := range d.Reasons {
		fmt.Println("-", r)
	}
	// Output:
	// builtin
	// - cron.chronos.callback_url is missing
	// - falling back to the built-in timer
}
