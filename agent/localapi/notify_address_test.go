package localapi_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/notify/notifytest"
)

// newNotifyEnv is a runtime with the address policy p and a resolver that
// knows hooks.internal (loopback) and hooks.public, with its local API on
// a loopback listener.
func newNotifyEnv(t *testing.T, p notify.AddressPolicy) *env {
	t.Helper()
	r := notifytest.Hooks()
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
	for _, c := range notifytest.RefusedHosts {
		u := "http://" + c.Host + ":8080/hook"
		code, b, _ := e.call(t, "POST", "/api/jobs", token, webhookJob("bad", u))
		var got struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(b, &got)
		if code != 422 || got.Error != "invalid_job" || !strings.Contains(got.Description, c.Says) {
			t.Errorf("create %s: %d %s; want 422 invalid_job saying %q", u, code, b, c.Says)
		}
		code, b, _ = e.call(t, "PATCH", "/api/jobs/keep", token, `{"notify_specs":["webhook:`+u+`"]}`)
		if code != 422 || !strings.Contains(string(b), c.Says) {
			t.Errorf("edit %s: %d %s; want 422 saying %q", u, code, b, c.Says)
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
