package notify_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/notify"
)

func TestParseTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		want notify.Target
	}{
		{"webhook:https://hooks.example.com/x", notify.Target{Kind: notify.KindWebhook, URL: "https://hooks.example.com/x"}},
		{" webhook:https://hooks.example.com/x?a=b@failed,recovered ", notify.Target{Kind: notify.KindWebhook,
			URL: "https://hooks.example.com/x?a=b", On: []notify.Event{notify.EventFailed, notify.EventRecovered}}},
		{"WEBHOOK:http://127.0.0.1:9/x", notify.Target{Kind: notify.KindWebhook, URL: "http://127.0.0.1:9/x"}}, // addresses are Validate's
		{"webhook:https://h.example.com/p?mail=a@b.example", notify.Target{Kind: notify.KindWebhook, URL: "https://h.example.com/p?mail=a@b.example"}},
		{"file:/var/log/chronos-events.jsonl", notify.Target{Kind: notify.KindFile, Path: "/var/log/chronos-events.jsonl"}},
		{"file:/var/log/me@home@failed", notify.Target{Kind: notify.KindFile, Path: "/var/log/me@home", On: []notify.Event{notify.EventFailed}}},
		{"file:/tmp/x@all", notify.Target{Kind: notify.KindFile, Path: "/tmp/x", On: notify.Events}},
		{"command:/usr/local/bin/page-me", notify.Target{Kind: notify.KindCommand, Command: []string{"/usr/local/bin/page-me"}}},
		{`command:page-me --team 'night shift' "say \"hi\"" a\ b@succeeded`, notify.Target{Kind: notify.KindCommand,
			Command: []string{"page-me", "--team", "night shift", `say "hi"`, "a b"}, On: []notify.Event{notify.EventSucceeded}}},
		{"file:/tmp/x@failed,partial", notify.Target{Kind: notify.KindFile, Path: "/tmp/x", On: []notify.Event{notify.EventFailed, notify.EventPartial}}},
		{`command:notify-send 'x@failed'`, notify.Target{Kind: notify.KindCommand, Command: []string{"notify-send", "x@failed"}}},
	} {
		got, err := notify.ParseTarget(tc.spec)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
			continue
		}
		// Spec writes what ParseTarget reads back.
		if again, err := notify.ParseTarget(got.Spec()); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("ParseTarget(%q.Spec() = %q) = %+v, %v", tc.spec, got.Spec(), again, err)
		}
	}
}

func TestParseTargetRefusesBadSpecs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, want string }{
		{"", "want KIND:DESTINATION"},
		{"https://hooks.example.com/x", `unknown kind "https"`},
		{"/var/log/x", "want KIND:DESTINATION"},
		{"pager:someone", `unknown kind "pager"`},
		{"webhook:", "needs a url"},
		{"webhook:ftp://example.com/x", "http or https"},
		{"webhook:https://user:pw@example.com/x", "user info"},
		{"file:events.jsonl", "must be absolute"},
		{"file:/tmp/x@failed,fialed", `unknown event "fialed"`},
		{"file:/tmp/x@failed,failed", "appears twice"},
		{"command:", "needs a program"},
		{"command:'unterminated", "unterminated single quote"},
		{`command:"unterminated`, "unterminated double quote"},
		{`command:trailing\`, "lone backslash"},
	} {
		_, err := notify.ParseTarget(tc.spec)
		if !errors.Is(err, notify.ErrInvalidTarget) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTarget(%q) = %v; want ErrInvalidTarget saying %q", tc.spec, err, tc.want)
		}
	}
}

func TestSplitJoinCommand(t *testing.T) {
	t.Parallel()
	for _, argv := range [][]string{
		{"/bin/echo"},
		{"sh", "-c", `echo "$CHRONOS_EVENT" >> /tmp/x; exit 0`},
		{"a'b", "", `c\d`, "e f", "#g", "~h", "i@failed"},
	} {
		got, err := notify.SplitCommand(notify.JoinCommand(argv))
		if err != nil || !reflect.DeepEqual(got, argv) {
			t.Errorf("SplitCommand(JoinCommand(%q) = %q) = %q, %v", argv, notify.JoinCommand(argv), got, err)
		}
	}
}

func TestChangeApply(t *testing.T) {
	t.Parallel()
	three, zero, neg := 3, 0, -1
	base := notify.Policy{Targets: []notify.Target{{Kind: notify.KindFile, Path: "/tmp/a"}}, NotifyAfter: 2, RenotifyEvery: 5}
	for _, tc := range []struct {
		name   string
		change notify.Change
		want   notify.Policy
		err    string
	}{
		{"nothing", notify.Change{}, base, ""},
		{"counts keep targets", notify.Change{NotifyAfter: &three, RenotifyEvery: &zero},
			notify.Policy{Targets: base.Targets, NotifyAfter: 3}, ""},
		{"specs replace targets", notify.Change{Specs: []string{"file:/tmp/b", "command:true"}},
			notify.Policy{Targets: []notify.Target{{Kind: notify.KindFile, Path: "/tmp/b"}, {Kind: notify.KindCommand, Command: []string{"true"}}},
				NotifyAfter: 2, RenotifyEvery: 5}, ""},
		{"none clears", notify.Change{Specs: []string{"none"}}, notify.Policy{NotifyAfter: 2, RenotifyEvery: 5}, ""},
		{"none with others", notify.Change{Specs: []string{"none", "file:/tmp/b"}}, base, "cannot be given with others"},
		{"bad spec", notify.Change{Specs: []string{"file:relative"}}, base, "absolute"},
		{"notify_after 0", notify.Change{NotifyAfter: &zero}, base, "at least 1"},
		{"renotify negative", notify.Change{RenotifyEvery: &neg}, base, "must not be negative"},
	} {
		got, err := tc.change.Apply(base)
		if tc.err != "" {
			if !errors.Is(err, notify.ErrInvalidTarget) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if base.Targets[0].Path != "/tmp/a" {
		t.Fatal("Apply changed the policy it was given")
	}
}

func TestPolicyDescribe(t *testing.T) {
	t.Parallel()
	if rows := (notify.Policy{}).Describe(notify.Streak{}); len(rows) != 1 || rows[0] != [2]string{"notify", "none"} {
		t.Fatalf("no targets: %q", rows)
	}
	p := notify.Policy{Targets: []notify.Target{{Kind: notify.KindWebhook, URL: "https://h.example.com/x"},
		{Kind: notify.KindFile, Path: "/tmp/e", On: []notify.Event{notify.EventSucceeded}}}, NotifyAfter: 3, RenotifyEvery: 2}
	got := p.Describe(notify.Streak{Failures: 4, Alerted: true})
	want := [][2]string{
		{"notify", "webhook:https://h.example.com/x (events failed,missed,interrupted,recovered,partial)"},
		{"notify", "file:/tmp/e@succeeded"},
		{"alerts", "failed after 3 consecutive failure(s), again every 2 more; recovered on the first success after an alert"},
		{"notify streak", "4 failure(s), alerted (recovered is sent on the next success)"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Describe:\n%q\nwant\n%q", got, want)
	}
}

// TestSpecKeepsAnAtOfTheDestination: a destination ending in "@word" is
// written with the default filter, so it is not read back as a filter.
func TestSpecKeepsAnAtOfTheDestination(t *testing.T) {
	t.Parallel()
	tg := notify.Target{Kind: notify.KindFile, Path: "/var/log/me@home"}
	got, err := notify.ParseTarget(tg.Spec())
	if err != nil || got.Path != tg.Path || !reflect.DeepEqual(got.On, notify.DefaultOn) {
		t.Fatalf("ParseTarget(%q) = %+v, %v", tg.Spec(), got, err)
	}
}

func TestPolicyKinds(t *testing.T) {
	t.Parallel()
	p := notify.Policy{Targets: []notify.Target{{Kind: notify.KindWebhook}, {Kind: notify.KindFile}, {Kind: notify.KindWebhook}}}
	if got := p.Kinds(); got != "webhook+file" {
		t.Fatalf("Kinds %q", got)
	}
	if got := (notify.Policy{}).Kinds(); got != "-" {
		t.Fatalf("no targets: %q", got)
	}
}
