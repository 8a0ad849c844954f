package localapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/notify"
)

// hostsResolver answers from a map; a missing name does not resolve.
type hostsResolver map[string][]netip.Addr

func (h hostsResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// newNotifyEnv is a runtime with the address policy p and a resolver that
// knows hooks.internal (loopback) and hooks.public, with its local API on
// a loopback listener.
func newNotifyEnv(t *testing.T, p notify.AddressPolicy) *env {
	t.Helper()
	r := hostsResolver{
		"hooks.internal": {netip.MustParseAddr("127.0.0.1")},
		"hooks.public":   {netip.MustParseAddr("8.8.8.8")},
	}
	return newEnv(t, envOptions{config: func(c *agent.Config) { c.NotifyAddresses, c.NotifyResolver = p, r }})
}

// webhookJob is a POST /api/jobs body with one webhook target.
func webhookJob(id, url string) string {
	return `{"id":"` + id + `","schedule":"every 1h","payload":{"kind":"shell","shell":{"command":"true"}},` +
		`"notify":{"notify":[{"kind":"webhook","url":"` + url + `"}]}}`
}

// TestAddWebhookEveryAddressForm: the API refuses a webhook naming a
// loopback, private, link-local or unspecified address in any numeric
// form, or a name resolving to one, with 422 invalid_job naming the
// address, on create and on edit, and stores nothing; a public address,
// a public name and a name that does not resolve now are accepted.
func TestAddWebhookEveryAddressForm(t *testing.T) {
	t.Parallel()
	e := newNotifyEnv(t, notify.AddressPolicy{})
	if code, b, _ := e.call(t, "POST", "/api/jobs", token, webhookJob("keep", "https://hooks.public/x")); code != 201 {
		t.Fatalf("keep: %d %s", code, b)
	}
	jobsFile := filepath.Join(e.home, "jobs.json")
	saved, err := os.ReadFile(jobsFile)
	if err != nil {
		t.Fatal(err)
	}
	refused := []struct{ host, says string }{
		{"127.0.0.1", "127.0.0.1 is not a public address (loopback)"},
		{"2130706433", "2130706433 is 127.0.0.1, not a public address (loopback)"},
		{"0x7f000001", "0x7f000001 is 127.0.0.1"},
		{"0177.0.0.1", "0177.0.0.1 is 127.0.0.1"},
		{"127.1", "127.1 is 127.0.0.1"},
		{"0x7f.1", "0x7f.1 is 127.0.0.1"},
		{"0", "0 is 0.0.0.0, not a public address (unspecified)"},
		{"0.0.0.0", "0.0.0.0 is not a public address (unspecified)"},
		{"127.0.0.1.", "127.0.0.1. is 127.0.0.1"},
		{"[::127.0.0.1]", "::127.0.0.1 is ::7f00:1, not a public address (it carries 127.0.0.1, loopback)"},
		{"[::ffff:127.0.0.1]", "is 127.0.0.1, not a public address (loopback)"},
		{"[::ffff:7f00:1]", "is 127.0.0.1, not a public address (loopback)"},
		{"0xa000001", "0xa000001 is 10.0.0.1, not a public address (private)"},
		{"2852039166", "2852039166 is 169.254.169.254, not a public address (link-local)"},
		{"localhost", "localhost is a loopback name"},
		{"hooks.internal", "hooks.internal resolves to 127.0.0.1, not a public address (loopback)"},
	}
	for _, c := range refused {
		u := "http://" + c.host + ":8080/hook"
		code, b, _ := e.call(t, "POST", "/api/jobs", token, webhookJob("bad", u))
		var got struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(b, &got)
		if code != 422 || got.Error != "invalid_job" || !strings.Contains(got.Description, c.says) {
			t.Errorf("create %s: %d %s; want 422 invalid_job saying %q", u, code, b, c.says)
		}
		code, b, _ = e.call(t, "PATCH", "/api/jobs/keep", token, `{"notify_specs":["webhook:`+u+`"]}`)
		if code != 422 || !strings.Contains(string(b), c.says) {
			t.Errorf("edit %s: %d %s; want 422 saying %q", u, code, b, c.says)
		}
	}
	if now, _ := os.ReadFile(jobsFile); !bytes.Equal(saved, now) {
		t.Fatalf("refused webhooks changed jobs.json:\n%s\n---\n%s", saved, now)
	}
	for i, u := range []string{"http://134744072/x", "https://8.8.8.8/x", "https://hooks.public/x", "https://hooks.elsewhere/x"} {
		if code, b, _ := e.call(t, "POST", "/api/jobs", token, webhookJob("ok"+string(rune('a'+i)), u)); code != 201 {
			t.Errorf("%s: %d %s; want 201", u, code, b)
		}
	}
}

// TestAddWebhookAllowPrivate: with allow_private the API accepts the
// loopback forms and the name resolving to loopback, and still refuses
// the unspecified address.
func TestAddWebhookAllowPrivate(t *testing.T) {
	t.Parallel()
	e := newNotifyEnv(t, notify.AddressPolicy{AllowPrivate: true})
	for i, u := range []string{"http://2130706433:8080/x", "http://[::127.0.0.1]/x", "http://hooks.internal/x", "http://localhost/x"} {
		if code, b, _ := e.call(t, "POST", "/api/jobs", token, webhookJob("p"+string(rune('a'+i)), u)); code != 201 {
			t.Errorf("%s: %d %s; want 201", u, code, b)
		}
	}
	if code, b, _ := e.call(t, "POST", "/api/jobs", token, webhookJob("zero", "http://0/x")); code != 422 || !strings.Contains(string(b), "unspecified") {
		t.Errorf("http://0/x: %d %s; want 422", code, b)
	}
}
