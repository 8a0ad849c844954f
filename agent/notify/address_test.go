package notify

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestParseHost: every form a resolver, a dialer or a browser takes for
// an address is read as that address; a name is a name; a host that ends
// in a number but is no address is refused.
func TestParseHost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		host string
		want string // the address; "name" for a host name; "invalid"
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0177.0.0.01", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0x7f.0x0.0.0x1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"2130706433.", "127.0.0.1"},
		{"１２７．０．０．１", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"00", "0.0.0.0"},
		{"0.0.0.0", "0.0.0.0"},
		{"0xa000001", "10.0.0.1"},
		{"0x0a.0.0.1", "10.0.0.1"},
		{"167772161", "10.0.0.1"},
		{"2852039166", "169.254.169.254"},
		{"134744072", "8.8.8.8"},
		{"::1", "::1"},
		{"[::1]", "::1"},
		{"::127.0.0.1", "::7f00:1"},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1"},
		{"::ffff:7f00:1", "::ffff:127.0.0.1"},
		{"fe80::1%eth0", "fe80::1%eth0"},
		{"hooks.example.com", "name"},
		{"localhost", "name"},
		{"123.example.com", "name"},
		{"0x7f.example", "name"},
		{"1.2.3.256", "invalid"},
		{"1.2.3.4.5", "invalid"},
		{"4294967296", "invalid"},
		{"0x1g.1", "invalid"},
		{"08.0.0.1", "invalid"},
		{"example.123", "invalid"},
		{"example.0x1f", "invalid"},
		{"127.0.0.1%eth0", "invalid"},
		{"::1::", "invalid"},
	}
	for _, c := range cases {
		ip, ok, err := ParseHost(c.host)
		var got string
		switch {
		case err != nil:
			got = "invalid"
			if !errors.Is(err, ErrInvalidTarget) {
				t.Errorf("ParseHost(%q): error %v does not wrap ErrInvalidTarget", c.host, err)
			}
		case !ok:
			got = "name"
		default:
			got = ip.String()
		}
		if got != c.want {
			t.Errorf("ParseHost(%q) = %s (%v), want %s", c.host, got, err, c.want)
		}
	}
}

// TestClassify: each class, and an IPv4 address carried in an IPv6 one
// classified as that address.
func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ip    string
		class Class
		inner string
	}{
		{"8.8.8.8", ClassPublic, ""},
		{"2606:4700::1111", ClassPublic, ""},
		{"0.0.0.0", ClassUnspecified, ""},
		{"::", ClassUnspecified, ""},
		{"224.0.0.1", ClassMulticast, ""},
		{"ff02::1", ClassMulticast, ""},
		{"127.0.0.1", ClassLoopback, ""},
		{"127.255.0.9", ClassLoopback, ""},
		{"::1", ClassLoopback, ""},
		{"::ffff:127.0.0.1", ClassLoopback, ""},
		{"10.0.0.1", ClassPrivate, ""},
		{"172.16.3.4", ClassPrivate, ""},
		{"192.168.1.1", ClassPrivate, ""},
		{"fd00::1", ClassPrivate, ""},
		{"169.254.169.254", ClassLinkLocal, ""},
		{"fe80::1%eth0", ClassLinkLocal, ""},
		{"0.1.2.3", ClassThisNetwork, ""},
		{"100.64.0.1", ClassShared, ""},
		{"192.0.0.8", ClassProtocol, ""},
		{"198.18.0.1", ClassBenchmark, ""},
		{"255.255.255.255", ClassReserved, ""},
		{"64:ff9b::7f00:1", ClassNAT64, ""},
		{"2001:db8::1", ClassDocument, ""},
		{"fec0::1", ClassSiteLocal, ""},
		{"::127.0.0.1", ClassLoopback, "127.0.0.1"},
		{"::10.0.0.1", ClassPrivate, "10.0.0.1"},
		{"::8.8.8.8", ClassPublic, "8.8.8.8"},
		{"2002:7f00:1::1", ClassLoopback, "127.0.0.1"},
		{"2002:a9fe:a9fe::", ClassLinkLocal, "169.254.169.254"},
		{"2002:808:808::1", ClassPublic, "8.8.8.8"},
	}
	for _, c := range cases {
		class, inner := Classify(netip.MustParseAddr(c.ip))
		got := ""
		if inner.IsValid() {
			got = inner.String()
		}
		if class != c.class || got != c.inner {
			t.Errorf("Classify(%s) = %s, %q; want %s, %q", c.ip, class, got, c.class, c.inner)
		}
	}
}

// refusedHosts are URL hosts (as in http://HOST:PORT/) naming loopback,
// private, link-local or unspecified addresses in every numeric form, each
// with the address it names.
var refusedHosts = []struct{ host, addr string }{
	{"127.0.0.1", "127.0.0.1"},
	{"2130706433", "127.0.0.1"},
	{"0x7f000001", "127.0.0.1"},
	{"017700000001", "127.0.0.1"},
	{"0177.0.0.1", "127.0.0.1"},
	{"127.1", "127.0.0.1"},
	{"0x7f.1", "127.0.0.1"},
	{"127.0.0.1.", "127.0.0.1"},
	{"[::127.0.0.1]", "::7f00:1"},
	{"[::ffff:127.0.0.1]", "127.0.0.1"},
	{"[::ffff:7f00:1]", "127.0.0.1"},
	{"[2002:7f00:1::]", "2002:7f00:1::"},
	{"[::1]", "::1"},
	{"0xa000001", "10.0.0.1"},
	{"2852039166", "169.254.169.254"},
	{"[fe80::1%25eth0]", "fe80::1"},
	{"0", "0.0.0.0"},
	{"0.0.0.0", "0.0.0.0"},
}

// TestCheckHostEveryForm: every numeric form of a refused address is
// refused at add time, naming the address it is; with allow_private the
// loopback and private ones pass and the unspecified stay refused; public
// forms pass.
func TestCheckHostEveryForm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, h := range refusedHosts {
		u := "http://" + h.host + ":9/hook"
		err := ValidateTarget(ctx, Target{Kind: KindWebhook, URL: u}, ValidateOptions{})
		if !errors.Is(err, ErrAddressNotAllowed) || !strings.Contains(err.Error(), h.addr) || !strings.Contains(err.Error(), "not a public address") {
			t.Errorf("%s: %v; want refused, naming %s", u, err, h.addr)
		}
		err = ValidateTarget(ctx, Target{Kind: KindWebhook, URL: u}, ValidateOptions{Addresses: AddressPolicy{AllowPrivate: true}})
		if unspecified := h.addr == "0.0.0.0"; unspecified != (err != nil) {
			t.Errorf("%s with allow_private: %v", u, err)
		}
	}
	for _, u := range []string{"http://134744072/x", "http://0x08080808/x", "http://8.8.8.8/x", "http://[::ffff:8.8.8.8]/x"} {
		if err := ValidateTarget(ctx, Target{Kind: KindWebhook, URL: u}, ValidateOptions{}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	listed := ValidateOptions{Addresses: AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}}
	if err := ValidateTarget(ctx, Target{Kind: KindWebhook, URL: "http://0xa000001/x"}, listed); err != nil {
		t.Errorf("a listed prefix in hex: %v", err)
	}
	if err := ValidateTarget(ctx, Target{Kind: KindWebhook, URL: "http://1.2.3.256/x"}, ValidateOptions{}); !errors.Is(err, ErrInvalidTarget) {
		t.Errorf("1.2.3.256: %v; want an invalid target", err)
	}
	err := ValidateTarget(ctx, Target{Kind: KindWebhook, URL: "http://2130706433/x"}, ValidateOptions{})
	if err == nil || !strings.Contains(err.Error(), "2130706433 is 127.0.0.1, not a public address (loopback)") {
		t.Errorf("the error does not say what the host is: %v", err)
	}
}

// fakeResolver answers from a map; a missing name does not resolve.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestCheckHostResolves: a name resolving to a refused address is refused
// naming it; a name that does not resolve is accepted and reported.
func TestCheckHostResolves(t *testing.T) {
	t.Parallel()
	r := fakeResolver{
		"hooks.internal": {netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("127.0.0.1")},
		"hooks.mapped":   {netip.MustParseAddr("::ffff:169.254.169.254")},
		"hooks.public":   {netip.MustParseAddr("8.8.8.8")},
	}
	var p AddressPolicy
	var missing []string
	note := func(host string, _ error) { missing = append(missing, host) }
	ctx := context.Background()
	if err := p.CheckHost(ctx, "hooks.internal", r, note); !errors.Is(err, ErrAddressNotAllowed) || !strings.Contains(err.Error(), "hooks.internal resolves to 127.0.0.1") {
		t.Errorf("hooks.internal: %v", err)
	}
	if err := p.CheckHost(ctx, "hooks.mapped", r, note); !errors.Is(err, ErrAddressNotAllowed) || !strings.Contains(err.Error(), "169.254.169.254") {
		t.Errorf("hooks.mapped: %v", err)
	}
	if err := p.CheckHost(ctx, "hooks.public", r, note); err != nil {
		t.Errorf("hooks.public: %v", err)
	}
	if err := p.CheckHost(ctx, "hooks.gone", r, note); err != nil || len(missing) != 1 || missing[0] != "hooks.gone" {
		t.Errorf("hooks.gone: %v, reported %q", err, missing)
	}
	if err := (AddressPolicy{AllowPrivate: true}).CheckHost(ctx, "hooks.internal", r, note); err != nil {
		t.Errorf("hooks.internal with allow_private: %v", err)
	}
}

// TestWebhookEveryFormRefusedAtSend: a notification to any numeric form of
// the receiver's loopback address is dead with the add-time answer, and
// the receiver gets nothing; with allow_private the numeric form reaches
// it, dialled as the address it names.
func TestWebhookEveryFormRefusedAtSend(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 200)
	port := rcv.srv.URL[strings.LastIndexByte(rcv.srv.URL, ':')+1:]
	s := NewWebhookSender(WebhookOptions{Secret: NewSecret(), Timeout: 5 * time.Second})
	for _, h := range refusedHosts {
		u := "http://" + h.host + ":" + port + "/hook"
		res := s.Send(context.Background(), sample("ntf_f", Target{Kind: KindWebhook, URL: u}))
		added := ValidateTarget(context.Background(), Target{Kind: KindWebhook, URL: u}, ValidateOptions{})
		if res.Outcome != OutcomeDead || added == nil || res.Error != added.Error() {
			t.Errorf("%s: sent %+v; added %v", u, res, added)
		}
	}
	if n := len(rcv.deliveries()); n != 0 {
		t.Fatalf("the loopback receiver got %d deliveries", n)
	}
	open := NewWebhookSender(WebhookOptions{Secret: NewSecret(), Addresses: AddressPolicy{AllowPrivate: true}, Timeout: 5 * time.Second})
	res := open.Send(context.Background(), sample("ntf_o", Target{Kind: KindWebhook, URL: "http://2130706433:" + port + "/hook"}))
	if res.Outcome != OutcomeSent || len(rcv.deliveries()) != 1 {
		t.Fatalf("allow_private, 2130706433: %+v, %d deliveries", res, len(rcv.deliveries()))
	}
}

// TestClientChecksConnectedAddress: a name the policy does not know (here
// localhost, from the hosts file, past the name check) is refused when
// the connection is made, on the address connected to.
func TestClientChecksConnectedAddress(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 200)
	u, err := url.Parse(rcv.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = "localhost:" + u.Port()
	resp, err := NewClient(AddressPolicy{}, 5*time.Second).Post(u.String(), "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("the client reached a loopback receiver")
	}
	if !errors.Is(err, ErrAddressNotAllowed) || !strings.Contains(err.Error(), "(loopback)") {
		t.Fatalf("error %v", err)
	}
	resp, err = NewClient(AddressPolicy{AllowPrivate: true}, 5*time.Second).Post(u.String(), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("allow_private: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("allow_private: status %d", resp.StatusCode)
	}
}
