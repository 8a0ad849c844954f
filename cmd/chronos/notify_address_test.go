package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/provider"
)

// namedHosts answers from a map; a missing name does not resolve.
type namedHosts map[string][]netip.Addr

func (h namedHosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestJobsNotifyEveryAddressForm: jobs add and jobs edit refuse a webhook
// naming a loopback, private, link-local or unspecified address in any
// numeric form, or a name resolving to one, with a usage error naming the
// address (the words the local API answers), and store nothing; a public
// address and a name that does not resolve now (with a warning) are
// accepted; allow_private in the serving agent's config lets the loopback
// forms through and not the unspecified address. Not parallel: it replaces
// the resolver the commands use.
func TestJobsNotifyEveryAddressForm(t *testing.T) {
	saved := notifyResolver
	t.Cleanup(func() { notifyResolver = saved })
	notifyResolver = namedHosts{
		"hooks.internal": {netip.MustParseAddr("127.0.0.1")},
		"hooks.public":   {netip.MustParseAddr("8.8.8.8")},
	}
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "keep", "--schedule", "every 1h", "--notify", "webhook:https://hooks.public/x", "--", "true")
	jobsFile := filepath.Join(home, "jobs.json")
	before, err := os.ReadFile(jobsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ host, says string }{
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
	} {
		spec := "webhook:http://" + c.host + ":8080/hook"
		code, _, errOut := cli(t, "jobs", "add", "--home", home, "--id", "bad", "--schedule", "every 1h", "--notify", spec, "--", "true")
		if code != exitUsage || !strings.Contains(errOut, c.says) || !strings.Contains(errOut, "notify.allow_private") {
			t.Errorf("add %s: exit %d, stderr %q; want %d saying %q", spec, code, errOut, exitUsage, c.says)
		}
		code, _, errOut = cli(t, "jobs", "edit", "--home", home, "keep", "--notify", spec)
		if code != exitUsage || !strings.Contains(errOut, c.says) {
			t.Errorf("edit %s: exit %d, stderr %q; want %d saying %q", spec, code, errOut, exitUsage, c.says)
		}
	}
	if after, _ := os.ReadFile(jobsFile); !bytes.Equal(before, after) {
		t.Fatalf("refused webhooks changed jobs.json:\n%s\n---\n%s", before, after)
	}
	mustCLI(t, "jobs", "add", "--home", home, "--id", "dec", "--schedule", "every 1h", "--notify", "webhook:http://134744072/x", "--", "true")
	code, _, errOut := cli(t, "jobs", "add", "--home", home, "--id", "later", "--schedule", "every 1h", "--notify", "webhook:https://hooks.elsewhere/x", "--", "true")
	if code != 0 || !strings.Contains(errOut, "warning: webhook host hooks.elsewhere does not resolve now") {
		t.Fatalf("a name that does not resolve: exit %d, stderr %q; want accepted with a warning", code, errOut)
	}

	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("home: "+home+"\nnotify:\n  allow_private: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := provider.RecordServing(home, cfg, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p1", "p2", "p3"} {
		host := map[string]string{"p1": "2130706433", "p2": "[::127.0.0.1]", "p3": "hooks.internal"}[id]
		if code, _, errOut := cli(t, "jobs", "add", "--home", home, "--id", id, "--schedule", "every 1h", "--notify", "webhook:http://"+host+"/x", "--", "true"); code != 0 {
			t.Errorf("allow_private, %s: exit %d, %s", host, code, errOut)
		}
	}
	if code, _, errOut := cli(t, "jobs", "add", "--home", home, "--id", "zero", "--schedule", "every 1h", "--notify", "webhook:http://0/x", "--", "true"); code != exitUsage || !strings.Contains(errOut, "unspecified") {
		t.Errorf("allow_private, 0: exit %d, %s; want refused", code, errOut)
	}
}
