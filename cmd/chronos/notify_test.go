package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/provider"
)

// showJob returns job id as jobs show --json prints it.
func showJob(t *testing.T, home, id string) agent.JobView {
	t.Helper()
	var j agent.JobView
	if err := json.Unmarshal([]byte(mustCLI(t, "jobs", "show", "--home", home, id, "--json")), &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestJobsAddNotifyEachKind: --notify takes a webhook, a file and a command
// (split like a shell line), with or without an event filter, and
// --notify-after and --renotify-every; show, show --json and list say so.
func TestJobsAddNotifyEachKind(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	events := filepath.Join(t.TempDir(), "events.jsonl")
	out := mustCLI(t, "jobs", "add", "--home", home, "--id", "n", "--schedule", "every 1h",
		"--notify", "webhook:https://93.184.215.14/hook",
		"--notify", "file:"+events+"@failed,recovered",
		"--notify", `command:/usr/local/bin/page-me --team 'night shift'@all`,
		"--notify-after", "3", "--renotify-every", "5", "--", "true")
	if !strings.Contains(out, "notify: file:"+events+"@failed,recovered") || !strings.Contains(out, "notify: command:/usr/local/bin/page-me --team 'night shift'@") {
		t.Fatalf("add output:\n%s", out)
	}
	want := notify.Policy{Targets: []notify.Target{
		{Kind: notify.KindWebhook, URL: "https://93.184.215.14/hook"},
		{Kind: notify.KindFile, Path: events, On: []notify.Event{notify.EventFailed, notify.EventRecovered}},
		{Kind: notify.KindCommand, Command: []string{"/usr/local/bin/page-me", "--team", "night shift"}, On: notify.Events},
	}, NotifyAfter: 3, RenotifyEvery: 5}
	if got := showJob(t, home, "n").Policy; !reflect.DeepEqual(got, want) {
		t.Fatalf("stored policy %+v\nwant %+v", got, want)
	}
	show := mustCLI(t, "jobs", "show", "--home", home, "n")
	for _, s := range []string{"webhook:https://93.184.215.14/hook (events failed,missed,interrupted,recovered,partial)",
		"failed after 3 consecutive failure(s), again every 5 more", "notify streak:"} {
		if !strings.Contains(show, s) {
			t.Errorf("show does not say %q:\n%s", s, show)
		}
	}
	if list := mustCLI(t, "jobs", "list", "--home", home); !strings.Contains(list, "NOTIFY") || !strings.Contains(list, "webhook+file+command") {
		t.Fatalf("list:\n%s", list)
	}
	// The policy is in jobs.json under its documented keys.
	raw, err := os.ReadFile(filepath.Join(home, "jobs.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"notify":`, `"notify_after":3`, `"renotify_every":5`} {
		if !bytes.Contains(raw, []byte(k)) {
			t.Errorf("jobs.json has no %s:\n%s", k, raw)
		}
	}
}

// TestJobsAddNotifyBadSpecs: a bad --notify fails with a usage error that
// says what is wrong, and stores nothing.
func TestJobsAddNotifyBadSpecs(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "keep", "--schedule", "every 1h", "--", "true")
	saved, err := os.ReadFile(filepath.Join(home, "jobs.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--notify", "https://93.184.215.14/x"}, `unknown kind "https"`},
		{[]string{"--notify", "slack:#ops"}, `unknown kind "slack"`},
		{[]string{"--notify", "file:events.jsonl"}, "must be absolute"},
		{[]string{"--notify", "file:/tmp/e.jsonl@failed,sometimes"}, `unknown event "sometimes"`},
		{[]string{"--notify", "command:'page-me"}, "unterminated single quote"},
		{[]string{"--notify", "webhook:ftp://93.184.215.14/x"}, "http or https"},
		{[]string{"--notify", "none", "--notify", "file:/tmp/e"}, "cannot be given with others"},
		{[]string{"--notify", "file:/tmp/e", "--notify-after", "0"}, "notify_after must be at least 1"},
		{[]string{"--notify", "file:/tmp/e", "--renotify-every", "-2"}, "renotify_every must not be negative"},
		{[]string{"--notify", "webhook:http://127.0.0.1:9/x"}, "notify.allow_private"},
		{[]string{"--notify", "webhook:http://10.1.2.3/x"}, "10.1.2.3 is not a public address"},
		{[]string{"--notify", "webhook:http://localhost:9/x"}, "localhost is a loopback name"},
		{[]string{"--notify", "webhook:http://localhost.:9/x"}, "loopback name"},
		{[]string{"--notify", "webhook:http://[::1]:9/x"}, "::1 is not a public address"},
	} {
		args := append([]string{"jobs", "add", "--home", home, "--id", "bad", "--schedule", "every 1h"}, tc.args...)
		code, _, errOut := cli(t, append(args, "--", "true")...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("add %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if now, _ := os.ReadFile(filepath.Join(home, "jobs.json")); !bytes.Equal(saved, now) {
		t.Fatalf("bad --notify changed jobs.json:\n%s\n---\n%s", saved, now)
	}
}

// TestJobsNotifyPrivateAllowedByConfig: a private webhook refused by
// default is accepted once the config of the agent serving the home allows
// it, by notify.allow_private or by a notify.allow prefix.
func TestJobsNotifyPrivateAllowedByConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, ok, refused string }{
		{"allow_private", "notify:\n  allow_private: true\n", "http://localhost:8080/hook", "http://0.0.0.0/hook"},
		{"allow", "notify:\n  allow: [10.1.0.0/16]\n", "http://10.1.2.3/hook", "http://127.0.0.1/hook"},
	} {
		home := t.TempDir()
		add := func(id, url string) (int, string) {
			code, _, errOut := cli(t, "jobs", "add", "--home", home, "--id", id, "--schedule", "every 1h", "--notify", "webhook:"+url, "--", "true")
			return code, errOut
		}
		if code, errOut := add("before", tc.ok); code != exitUsage || !strings.Contains(errOut, "notify.allow_private") {
			t.Fatalf("%s: before the config: exit %d, %s", tc.name, code, errOut)
		}
		cfg := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(cfg, []byte("home: "+home+"\n"+tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := provider.RecordServing(home, cfg, time.Now()); err != nil {
			t.Fatal(err)
		}
		if code, errOut := add("after", tc.ok); code != 0 {
			t.Fatalf("%s: allowed by the config: exit %d, %s", tc.name, code, errOut)
		}
		if code, errOut := add("still", tc.refused); code != exitUsage || !strings.Contains(errOut, "not allowed") {
			t.Fatalf("%s: %s is still refused: exit %d, %s", tc.name, tc.refused, code, errOut)
		}
		if got := showJob(t, home, "after").Targets; len(got) != 1 || got[0].URL != tc.ok {
			t.Fatalf("%s: stored %+v", tc.name, got)
		}
	}
}

// TestJobsEditNotify: --notify on jobs edit replaces the targets, --notify
// none clears them, and --notify-after alone keeps them.
func TestJobsEditNotify(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "e", "--schedule", "every 1h",
		"--notify", "file:/tmp/a.jsonl", "--notify", "file:/tmp/b.jsonl", "--", "true")
	mustCLI(t, "jobs", "edit", "--home", home, "e", "--notify-after", "4")
	if p := showJob(t, home, "e").Policy; len(p.Targets) != 2 || p.NotifyAfter != 4 {
		t.Fatalf("--notify-after alone: %+v", p)
	}
	mustCLI(t, "jobs", "edit", "--home", home, "e", "--notify", "command:/bin/true@failed")
	want := []notify.Target{{Kind: notify.KindCommand, Command: []string{"/bin/true"}, On: []notify.Event{notify.EventFailed}}}
	if p := showJob(t, home, "e").Policy; !reflect.DeepEqual(p.Targets, want) || p.NotifyAfter != 4 {
		t.Fatalf("replaced: %+v", p)
	}
	code, _, errOut := cli(t, "jobs", "edit", "--home", home, "e", "--notify", "webhook:http://127.0.0.1/x")
	if code != exitUsage || !strings.Contains(errOut, "notify.allow_private") {
		t.Fatalf("private webhook on edit: exit %d, %s", code, errOut)
	}
	if code, _, errOut := cli(t, "jobs", "edit", "--home", home, "nope", "--notify", "none"); code != exitUsage || !strings.Contains(errOut, "not found") {
		t.Fatalf("unknown job: exit %d, %s", code, errOut)
	}
	mustCLI(t, "jobs", "edit", "--home", home, "e", "--notify", "none")
	if p := showJob(t, home, "e").Policy; len(p.Targets) != 0 || p.NotifyAfter != 4 {
		t.Fatalf("cleared: %+v", p)
	}
	if out := mustCLI(t, "jobs", "show", "--home", home, "e"); !strings.Contains(out, "notify:          none") {
		t.Fatalf("show after clearing:\n%s", out)
	}
}

// outboxRows fills home's outbox: one pending, one sent and one dead
// notification, oldest first.
func outboxRows(t *testing.T, home string) []notify.Row {
	t.Helper()
	ctx := context.Background()
	box, err := notify.OpenFileOutbox(notify.HomeDir(home), notify.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = box.Close() }()
	start := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	var ns []notify.Notification
	for i, e := range []notify.Event{notify.EventFailed, notify.EventSucceeded, notify.EventRecovered} {
		tg := notify.Target{Kind: notify.KindWebhook, URL: "https://93.184.215.14/hook"}
		ns = append(ns, notify.Notification{ID: "ntf-" + string(e), Target: tg, CreatedAt: start.Add(time.Duration(i) * time.Minute),
			Body: notify.Body{Event: e, JobID: "backup", RunID: "run-" + string(e)}})
	}
	if _, err := box.Add(ctx, ns...); err != nil {
		t.Fatal(err)
	}
	for id, a := range map[string]notify.Attempt{
		"ntf-succeeded": {State: notify.StateSent, Status: 200},
		"ntf-recovered": {State: notify.StateDead, Status: 503, Error: "service unavailable"},
	} {
		claim, err := box.Claim(ctx, id, "test", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := box.Done(ctx, claim, a); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := box.List(ctx)
	if err != nil || len(rows) != 3 {
		t.Fatalf("outbox rows %+v, %v", rows, err)
	}
	return rows
}

// TestNotifyListReplaySecret: notify list shows the outbox (all, --pending,
// --dead, --json), notify replay makes a dead notification pending again
// under its id and refuses an unknown id changing nothing, and notify
// secret prints one stable whsec_ secret.
func TestNotifyListReplaySecret(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	outboxRows(t, home)
	ids := func(args ...string) []string {
		var rows []notify.Row
		if err := json.Unmarshal([]byte(mustCLI(t, append([]string{"notify", "list", "--home", home, "--json"}, args...)...)), &rows); err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, r := range rows {
			out = append(out, r.ID+"="+string(r.State))
		}
		return out
	}
	if got := ids(); !reflect.DeepEqual(got, []string{"ntf-failed=pending", "ntf-succeeded=sent", "ntf-recovered=dead"}) {
		t.Fatalf("list: %v", got)
	}
	if got := ids("--pending"); !reflect.DeepEqual(got, []string{"ntf-failed=pending"}) {
		t.Fatalf("--pending: %v", got)
	}
	if got := ids("--dead"); !reflect.DeepEqual(got, []string{"ntf-recovered=dead"}) {
		t.Fatalf("--dead: %v", got)
	}
	table := mustCLI(t, "notify", "list", "--home", home)
	for _, s := range []string{"ID", "ATTEMPTS", "ntf-recovered", "recovered", "backup", "run-recovered", "webhook:https://93.184.215.14/hook", "dead", "HTTP 503 service unavailable", "now"} {
		if !strings.Contains(table, s) {
			t.Errorf("list table does not show %q:\n%s", s, table)
		}
	}
	if code, _, errOut := cli(t, "notify", "list", "--home", home, "--pending", "--dead"); code != exitUsage || !strings.Contains(errOut, "pending") {
		t.Fatalf("--pending --dead: exit %d, %s", code, errOut)
	}

	log := filepath.Join(notify.HomeDir(home), notify.OutboxFile)
	before, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "notify", "replay", "--home", home, "ntf-nope")
	if code != exitFailure || out != "" || !strings.Contains(errOut, `no notification "ntf-nope"`) {
		t.Fatalf("replay of an unknown id: exit %d, %q, %q", code, out, errOut)
	}
	if after, _ := os.ReadFile(log); !bytes.Equal(before, after) {
		t.Fatal("a refused replay changed the outbox")
	}
	if out := mustCLI(t, "notify", "replay", "--home", home, "ntf-recovered"); !strings.Contains(out, "ntf-recovered") || !strings.Contains(out, "is pending") {
		t.Fatalf("replay: %s", out)
	}
	var replayed notify.Row
	if err := decodeOne(mustCLI(t, "notify", "replay", "--home", home, "ntf-succeeded", "--json"), &replayed); err != nil ||
		replayed.ID != "ntf-succeeded" || replayed.State != notify.StatePending {
		t.Fatalf("replay --json: %+v %v", replayed, err)
	}
	if got := ids("--pending"); !reflect.DeepEqual(got, []string{"ntf-failed=pending", "ntf-succeeded=pending", "ntf-recovered=pending"}) {
		t.Fatalf("after replays: %v", got)
	}
	if got := ids("--dead"); len(got) != 0 {
		t.Fatalf("dead after replay: %v", got)
	}

	secret := strings.TrimSpace(mustCLI(t, "notify", "secret", "--home", home))
	if _, err := notify.ParseSecret(secret); err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q: %v", secret, err)
	}
	if again := strings.TrimSpace(mustCLI(t, "notify", "secret", "--home", home)); again != secret {
		t.Fatalf("secret changed: %q then %q", secret, again)
	}
	if onDisk, err := notify.LoadOrCreateSecret(notify.HomeDir(home)); err != nil || onDisk.String() != secret {
		t.Fatalf("the agent's secret is %v (%v), notify secret printed %s", onDisk, err, secret)
	}
}
