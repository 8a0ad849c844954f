package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/notify/notifytest"
	"github.com/chronoscron/chronos/agent/provider"
)

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
	notifyResolver = notifytest.Hooks()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "keep", "--schedule", "every 1h", "--notify", "webhook:https://hooks.public/x", "--", "true")
	jobsFile := filepath.Join(home, "jobs.json")
	before, err := os.ReadFile(jobsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range notifytest.RefusedHosts {
		spec := "webhook:http://" + c.Host + ":8080/hook"
		code, _, errOut := cli(t, "jobs", "add", "--home", home, "--id", "bad", "--schedule", "every 1h", "--notify", spec, "--", "true")
		if code != exitUsage || !strings.Contains(errOut, c.Says) || !strings.Contains(errOut, "notify.allow_private") {
			t.Errorf("add %s: exit %d, stderr %q; want %d saying %q", spec, code, errOut, exitUsage, c.Says)
		}
		code, _, errOut = cli(t, "jobs", "edit", "--home", home, "keep", "--notify", spec)
		if code != exitUsage || !strings.Contains(errOut, c.Says) {
			t.Errorf("edit %s: exit %d, stderr %q; want %d saying %q", spec, code, errOut, exitUsage, c.Says)
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
