package provider_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/provider"
)

const fullYAML = `
home: /var/lib/chronos
listen: 127.0.0.1:9000
timezone: Europe/Berlin
cron:
  provider: chronos
  chronos:
    portal_url: https://nas.example
    callback_url: https://agent.example
    expected_audience: agent:inst-1
    nas_jwks_url: https://nas.example/.well-known/jwks.json
    access_token_file: /run/secrets/token
`

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := provider.ParseConfig([]byte(fullYAML))
	if err != nil {
		t.Fatal(err)
	}
	if c.Home != "/var/lib/chronos" || c.Listen != "127.0.0.1:9000" || c.Timezone != "Europe/Berlin" ||
		c.Cron.Provider != "chronos" || c.Cron.Chronos.NASJWKSURL != "https://nas.example/.well-known/jwks.json" ||
		c.Cron.Chronos.AccessTokenFile != "/run/secrets/token" {
		t.Fatalf("parsed %+v", c)
	}
	if c.Cron.Chronos.ExpectedIssuer() != "https://nas.example" {
		t.Fatalf("issuer %q", c.Cron.Chronos.ExpectedIssuer())
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"cron:\n  provider: chronos\n  chronos:\n    portal_ur: x\n", // typo
		"access_token: secret\n",                                     // tokens never come from the file
		"home: [1, 2]\n",
	} {
		if _, err := provider.ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%q) accepted", bad)
		}
	}
	if _, err := provider.ParseConfig(nil); err != nil {
		t.Errorf("an empty file: %v", err)
	}
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	c, err := provider.ParseConfig([]byte(fullYAML))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"CHRONOS_CRON_CHRONOS_PORTAL_URL": " https://other.example ",
		"CHRONOS_LISTEN":                  "0.0.0.0:80",
		"CHRONOS_ACCESS_TOKEN":            "tok\n",
		"CHRONOS_CRON_PROVIDER":           "",
		"CHRONOS_UNRELATED":               "x",
	}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.Cron.Chronos.PortalURL != "https://other.example" || c.Listen != "0.0.0.0:80" ||
		c.Cron.Chronos.AccessToken != "tok" || c.Cron.Provider != "" || c.Home != "/var/lib/chronos" {
		t.Fatalf("after env: %+v", c)
	}
	names := provider.EnvNames()
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] || !strings.HasPrefix(n, "CHRONOS_") {
			t.Fatalf("env names %v: %s twice or without CHRONOS_", names, n)
		}
		seen[n] = true
	}
	for _, n := range []string{"CHRONOS_HOME", "CHRONOS_LISTEN", "CHRONOS_UI_LISTEN", "CHRONOS_UI_HOSTS", "CHRONOS_ACCESS_TOKEN",
		"CHRONOS_CRON_CHRONOS_PORTAL_URL", "CHRONOS_NOTIFY_ALLOW_PRIVATE", "CHRONOS_SQL_DSNS"} {
		if !seen[n] {
			t.Fatalf("env names %v: no %s", names, n)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	c := provider.Config{Home: "/h", Listen: ":1", Timezone: "Mars/Olympus"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "timezone") {
		t.Fatalf("error %v", err)
	}
	c = provider.Config{}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "home") || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("error %v", err)
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	good := func() provider.Config {
		c, _ := provider.ParseConfig([]byte(fullYAML))
		c.Cron.Chronos.AccessToken = "tok"
		return c
	}
	tests := []struct {
		name string
		edit func(*provider.Config)
		want []string // parts of the reasons; none means chronos is used
	}{
		{name: "complete", edit: func(*provider.Config) {}},
		{name: "provider empty", edit: func(c *provider.Config) { c.Cron.Provider = "" }, want: []string{"cron.provider is empty"}},
		{name: "provider builtin", edit: func(c *provider.Config) { c.Cron.Provider = "builtin" }, want: []string{"cron.provider is builtin: the built-in timer is used"}},
		{name: "provider unknown", edit: func(c *provider.Config) { c.Cron.Provider = "cronos" }, want: []string{`cron.provider "cronos" is not known`}},
		{name: "portal missing", edit: func(c *provider.Config) { c.Cron.Chronos.PortalURL = "" }, want: []string{"cron.chronos.portal_url is missing"}},
		{name: "callback relative", edit: func(c *provider.Config) { c.Cron.Chronos.CallbackURL = "agent.example" }, want: []string{"cron.chronos.callback_url \"agent.example\" is not an absolute"}},
		{name: "jwks with credentials", edit: func(c *provider.Config) { c.Cron.Chronos.NASJWKSURL = "https://u:p@nas.example/jwks" }, want: []string{"cron.chronos.nas_jwks_url must not carry credentials"}},
		{name: "audience missing", edit: func(c *provider.Config) { c.Cron.Chronos.ExpectedAudience = "" }, want: []string{"cron.chronos.expected_audience is missing"}},
		{name: "audience without prefix", edit: func(c *provider.Config) { c.Cron.Chronos.ExpectedAudience = "inst-1" }, want: []string{"must be agent:{instance_id}"}},
		{name: "no token", edit: func(c *provider.Config) {
			c.Cron.Chronos.AccessToken, c.Cron.Chronos.AccessTokenFile = "", ""
		}, want: []string{"no access token: set CHRONOS_ACCESS_TOKEN or cron.chronos.access_token_file"}},
		{name: "token file unreadable", edit: func(c *provider.Config) {
			c.Cron.Chronos.AccessToken, c.Cron.Chronos.AccessTokenErr = "", errors.New("open /run/secrets/token: permission denied")
		}, want: []string{"cron.chronos.access_token_file: open /run/secrets/token: permission denied"}},
		{name: "token file empty", edit: func(c *provider.Config) { c.Cron.Chronos.AccessToken = "" }, want: []string{`access_token_file "/run/secrets/token" is empty`}},
		{name: "several at once", edit: func(c *provider.Config) {
			c.Cron.Chronos.PortalURL, c.Cron.Chronos.CallbackURL = "", ""
		}, want: []string{"portal_url is missing", "callback_url is missing", "falling back to the built-in timer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := good()
			tt.edit(&c)
			d := provider.Decide(c)
			if len(tt.want) == 0 {
				if !d.Chronos() || len(d.Reasons) != 0 {
					t.Fatalf("decision %+v, want chronos", d)
				}
				return
			}
			if d.Chronos() || d.Provider != provider.Builtin {
				t.Fatalf("decision %+v, want builtin", d)
			}
			for _, w := range tt.want {
				if !strings.Contains(d.Why(), w) {
					t.Errorf("why %q lacks %q", d.Why(), w)
				}
			}
		})
	}
}

// TestConfigErrorsAreOneLine pins that a bad config is reported on one line,
// naming the key, so the CLI's "one clear line" holds.
func TestConfigErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown keys", "cron:\n  provider: chronos\n  chronos:\n    portal: x\n    jwks: y\n", "portal"},
		{"bad timezone", "home: /h\nlisten: :1\ntimezone: Mars/Olympus\n", `timezone "Mars/Olympus"`},
		{"several missing", "timezone: Mars/Olympus\n", "home: required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := provider.ParseConfig([]byte(tc.yaml))
			if err == nil {
				err = c.Validate()
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q: want one line naming %q", msg, tc.want)
			}
		})
	}
}
