package notify

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// specialPrefixes are ranges that are never public though the netip
// predicates do not name them.
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// Allowed reports whether ip may be dialled.
func (p AddressPolicy) Allowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, pre := range p.Allow {
		if pre.Contains(ip) {
			return true
		}
	}
	if ip.IsUnspecified() || ip.IsMulticast() {
		return false
	}
	private := ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast()
	for _, pre := range specialPrefixes {
		if pre.Contains(ip) {
			private = true
		}
	}
	return !private || p.AllowPrivate
}

// NewClient returns an HTTP client whose every connection is checked
// against p after DNS resolution, at dial time, so a name that resolves
// (or re-resolves) to a refused address is never reached. It uses no proxy
// (a proxy would bypass the check) and follows no redirects.
func NewClient(p AddressPolicy, timeout time.Duration) *http.Client {
	control := func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrAddressNotAllowed, address)
		}
		if !p.Allowed(ap.Addr()) {
			return fmt.Errorf("%w: %s", ErrAddressNotAllowed, ap.Addr().Unmap())
		}
		return nil
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: control}
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
