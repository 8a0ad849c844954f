package provider_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/provider"
)

// TestNotifyConfigFromFileAndEnv: notify.allow_private and notify.allow
// come from agent.yaml and from CHRONOS_NOTIFY_ALLOW_PRIVATE and
// CHRONOS_NOTIFY_ALLOW, and become the webhooks' address policy.
func TestNotifyConfigFromFileAndEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(path, []byte("home: h\nnotify:\n  allow: [10.20.0.0/16, 192.168.1.7]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := provider.LoadConfig(path, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	got, err := cfg.Notify.Addresses()
	want := notify.AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("192.168.1.7/32")}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("from the file: %+v, %v; want %+v", got, err, want)
	}
	if got := cfg.NotifyAddresses(); !reflect.DeepEqual(got, want) {
		t.Fatalf("NotifyAddresses %+v, want %+v", got, want)
	}
	cfg, _, err = provider.LoadConfig(path, envMap(map[string]string{
		"CHRONOS_NOTIFY_ALLOW_PRIVATE": "true", "CHRONOS_NOTIFY_ALLOW": "fd00::/8, 10.1.2.3/24"}))
	if err != nil {
		t.Fatal(err)
	}
	got, err = cfg.Notify.Addresses()
	want = notify.AddressPolicy{AllowPrivate: true, Allow: []netip.Prefix{netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("10.1.2.0/24")}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("from the environment: %+v, %v; want %+v", got, err, want)
	}
	_, _, err = provider.LoadConfig(path, envMap(map[string]string{"CHRONOS_NOTIFY_ALLOW_PRIVATE": "sometimes"}))
	if err == nil || !strings.Contains(err.Error(), "CHRONOS_NOTIFY_ALLOW_PRIVATE") {
		t.Fatalf("a bad boolean: %v", err)
	}
}

// hostsResolver resolves names from a map.
type hostsResolver map[string][]netip.Addr

func (r hostsResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

// TestCheckNotify: a webhook whose address is private, literally or once
// resolved, is refused with an error naming the settings that allow it,
// and is accepted once they do.
func TestCheckNotify(t *testing.T) {
	t.Parallel()
	res := hostsResolver{"intranet.example": {netip.MustParseAddr("10.0.0.5")}, "public.example": {netip.MustParseAddr("93.184.215.14")}}
	policy := func(url string) notify.Policy {
		return notify.Policy{Targets: []notify.Target{{Kind: notify.KindWebhook, URL: url}}}
	}
	for _, tc := range []struct {
		url   string
		cfg   provider.NotifyConfig
		allow bool
	}{
		{"https://public.example/x", provider.NotifyConfig{}, true},
		{"https://intranet.example/x", provider.NotifyConfig{}, false},
		{"http://127.0.0.1:8080/x", provider.NotifyConfig{}, false},
		{"http://localhost:8080/x", provider.NotifyConfig{}, false},
		{"https://intranet.example/x", provider.NotifyConfig{Allow: []string{"10.0.0.0/24"}}, true},
		{"http://127.0.0.1:8080/x", provider.NotifyConfig{Allow: []string{"10.0.0.0/24"}}, false},
		{"http://localhost:8080/x", provider.NotifyConfig{AllowPrivate: true}, true},
	} {
		err := provider.Config{Notify: tc.cfg}.CheckNotify(context.Background(), policy(tc.url), res)
		switch {
		case tc.allow && err != nil:
			t.Errorf("%s under %+v: %v", tc.url, tc.cfg, err)
		case !tc.allow && (!errors.Is(err, notify.ErrAddressNotAllowed) || !strings.Contains(err.Error(), "notify.allow_private")):
			t.Errorf("%s under %+v: %v; want refused, naming notify.allow_private", tc.url, tc.cfg, err)
		}
	}
	bad := provider.Config{Notify: provider.NotifyConfig{Allow: []string{"not-a-prefix", "10.0.0.0/8"}}}
	if got := bad.NotifyAddresses(); len(got.Allow) != 1 || got.Allow[0] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Fatalf("NotifyAddresses of a bad list: %+v", got)
	}
	if err := bad.CheckNotify(context.Background(), policy("https://public.example/x"), res); err == nil || !strings.Contains(err.Error(), "notify.allow") {
		t.Fatalf("a bad prefix: %v", err)
	}
}
