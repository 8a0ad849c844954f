package notify

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestValidateTarget(t *testing.T) {
	t.Parallel()
	public := ValidateOptions{}
	private := ValidateOptions{Addresses: AddressPolicy{AllowPrivate: true}}
	listed := ValidateOptions{Addresses: AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}}
	cases := []struct {
		name string
		t    Target
		opts ValidateOptions
		want error
		msg  string
	}{
		{"webhook", Target{Kind: KindWebhook, URL: "https://hooks.example.com/a?x=1"}, public, nil, ""},
		{"webhook public literal", Target{Kind: KindWebhook, URL: "http://8.8.8.8/x"}, public, nil, ""},
		{"loopback refused", Target{Kind: KindWebhook, URL: "http://127.0.0.1:9/x"}, public, ErrAddressNotAllowed, "not a public address"},
		{"private refused", Target{Kind: KindWebhook, URL: "http://10.1.2.3/x"}, public, ErrAddressNotAllowed, ""},
		{"link-local refused", Target{Kind: KindWebhook, URL: "http://169.254.169.254/latest"}, public, ErrAddressNotAllowed, ""},
		{"unspecified refused", Target{Kind: KindWebhook, URL: "http://0.0.0.0/x"}, private, ErrAddressNotAllowed, ""},
		{"v6 loopback refused", Target{Kind: KindWebhook, URL: "http://[::1]/x"}, public, ErrAddressNotAllowed, ""},
		{"mapped v4 refused", Target{Kind: KindWebhook, URL: "http://[::ffff:192.168.1.1]/x"}, public, ErrAddressNotAllowed, ""},
		{"localhost refused", Target{Kind: KindWebhook, URL: "http://localhost:8080/x"}, public, ErrAddressNotAllowed, "loopback"},
		{"private allowed", Target{Kind: KindWebhook, URL: "http://127.0.0.1:9/x"}, private, nil, ""},
		{"listed prefix allowed", Target{Kind: KindWebhook, URL: "http://10.1.2.3/x"}, listed, nil, ""},
		{"unlisted private", Target{Kind: KindWebhook, URL: "http://10.2.2.3/x"}, listed, ErrAddressNotAllowed, ""},
		{"ftp", Target{Kind: KindWebhook, URL: "ftp://example.com/x"}, public, ErrInvalidTarget, "http or https"},
		{"relative", Target{Kind: KindWebhook, URL: "/hook"}, public, ErrInvalidTarget, ""},
		{"user info", Target{Kind: KindWebhook, URL: "https://u:p@example.com/"}, public, ErrInvalidTarget, "user info"},
		{"no url", Target{Kind: KindWebhook}, public, ErrInvalidTarget, "needs a url"},
		{"webhook with path", Target{Kind: KindWebhook, URL: "https://example.com/", Path: "/tmp/x"}, public, ErrInvalidTarget, "only url"},
		{"command", Target{Kind: KindCommand, Command: []string{"notify-send", "job failed"}}, public, nil, ""},
		{"empty command", Target{Kind: KindCommand, Command: []string{""}}, public, ErrInvalidTarget, "argv[0]"},
		{"no command", Target{Kind: KindCommand}, public, ErrInvalidTarget, ""},
		{"file", Target{Kind: KindFile, Path: "/var/log/chronos/alerts.jsonl"}, public, nil, ""},
		{"relative file", Target{Kind: KindFile, Path: "alerts.jsonl"}, public, ErrInvalidTarget, "absolute"},
		{"directory file", Target{Kind: KindFile, Path: "/var/log/"}, public, ErrInvalidTarget, "directory"},
		{"no kind", Target{URL: "https://example.com"}, public, ErrInvalidTarget, "kind is required"},
		{"bad kind", Target{Kind: "email"}, public, ErrInvalidTarget, "unknown kind"},
		{"bad event", Target{Kind: KindFile, Path: "/x", On: []Event{"done"}}, public, ErrInvalidTarget, "unknown event"},
		{"twice", Target{Kind: KindFile, Path: "/x", On: []Event{EventFailed, EventFailed}}, public, ErrInvalidTarget, "twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateTarget(context.Background(), c.t, c.opts)
			if c.want == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want %v containing %q", err, c.want, c.msg)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bad := Policy{Targets: []Target{{Kind: KindFile, Path: "/ok"}, {Kind: KindWebhook, URL: "http://192.168.0.10/"}}}
	if err := bad.Validate(ctx, ValidateOptions{}); !errors.Is(err, ErrAddressNotAllowed) || !strings.HasPrefix(err.Error(), "notify[1]: ") {
		t.Fatalf("error %v, want the second target refused", err)
	}
	if err := (Policy{NotifyAfter: -1}).Validate(ctx, ValidateOptions{}); !errors.Is(err, ErrInvalidTarget) {
		t.Fatalf("negative notify_after: %v", err)
	}
	if err := (Policy{RenotifyEvery: -1}).Validate(ctx, ValidateOptions{}); !errors.Is(err, ErrInvalidTarget) {
		t.Fatalf("negative renotify_every: %v", err)
	}
	if (Policy{}).Threshold() != 1 || (Policy{NotifyAfter: 3}).Threshold() != 3 {
		t.Fatal("threshold default")
	}
}

// The names are those jobs.json and job YAML files use.
func TestPolicyFieldNames(t *testing.T) {
	t.Parallel()
	const doc = `{"notify":[{"kind":"webhook","url":"https://h.example.com/x","on":["failed","recovered"]},` +
		`{"kind":"command","command":["notify-send","x"]},{"kind":"file","path":"/var/log/a.jsonl"}],` +
		`"notify_after":3,"renotify_every":5}`
	var p Policy
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.NotifyAfter != 3 || p.RenotifyEvery != 5 || len(p.Targets) != 3 || p.Targets[0].On[1] != EventRecovered ||
		p.Targets[1].Command[0] != "notify-send" || p.Targets[2].Path != "/var/log/a.jsonl" {
		t.Fatalf("decoded %+v", p)
	}
	out, _ := json.Marshal(p)
	if string(out) != doc {
		t.Fatalf("round trip\n got %s\nwant %s", out, doc)
	}
	var y Policy
	if err := yaml.Unmarshal([]byte("notify:\n  - kind: file\n    path: /a\n    on: [failed]\nnotify_after: 2\nrenotify_every: 4\n"), &y); err != nil {
		t.Fatal(err)
	}
	if y.NotifyAfter != 2 || y.RenotifyEvery != 4 || y.Targets[0].Path != "/a" || y.Targets[0].On[0] != EventFailed {
		t.Fatalf("yaml %+v", y)
	}
	if !(Target{}).Wants(EventFailed) || (Target{}).Wants(EventSucceeded) || !p.Targets[0].Wants(EventRecovered) || p.Targets[0].Wants(EventMissed) {
		t.Fatal("filter")
	}
}

// hostsResolver answers from a fixed table.
type hostsResolver map[string][]netip.Addr

func (h hostsResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func TestValidateTargetResolves(t *testing.T) {
	t.Parallel()
	r := hostsResolver{
		"hooks.example.com":    {netip.MustParseAddr("93.184.215.14")},
		"internal.example.com": {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.7")},
	}
	ctx := context.Background()
	hook := func(host string) Target { return Target{Kind: KindWebhook, URL: "https://" + host + "/x"} }
	if err := ValidateTarget(ctx, hook("hooks.example.com"), ValidateOptions{Resolver: r}); err != nil {
		t.Fatalf("public name: %v", err)
	}
	err := ValidateTarget(ctx, hook("internal.example.com"), ValidateOptions{Resolver: r})
	if !errors.Is(err, ErrAddressNotAllowed) || !strings.Contains(err.Error(), "10.0.0.7") {
		t.Fatalf("name with a private address: %v", err)
	}
	if err := ValidateTarget(ctx, hook("internal.example.com"), ValidateOptions{Resolver: r, Addresses: AddressPolicy{AllowPrivate: true}}); err != nil {
		t.Fatalf("allowed private: %v", err)
	}
	if err := ValidateTarget(ctx, hook("unknown.example.com"), ValidateOptions{Resolver: r}); err != nil {
		t.Fatalf("unresolvable name: %v", err)
	}
	if err := ValidateTarget(ctx, hook("internal.example.com"), ValidateOptions{}); err != nil {
		t.Fatalf("no resolver: %v", err)
	}
}
