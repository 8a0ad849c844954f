package agentcall

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/chronoscron/chronos/contract"
)

// ErrAddressNotAllowed is returned (wrapped) when a callback resolves to an
// address the SSRF policy refuses.
var ErrAddressNotAllowed = errors.New("callback address not allowed")

// metadataAddrs are cloud metadata endpoints: refused even when private
// callbacks are allowed (only an explicit allowlist entry lets them through).
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// specialPrefixes are ranges that are never public even though the netip
// predicates do not name them.
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 can reach private IPv4
	netip.MustParsePrefix("2001:db8::/32"),
}

// Policy decides which addresses agent callbacks may reach.
type Policy struct {
	// AllowPrivate lets loopback, private and link-local addresses through
	// (development only); metadata, unspecified and multicast stay refused.
	AllowPrivate bool
	// Allow lists prefixes and host names that are always allowed.
	Allow Allowlist
}

// Allowlist is the parsed callback_allowlist: address prefixes and host names.
type Allowlist struct {
	Prefixes []netip.Prefix
	Hosts    []string
}

// ParseAllowlist parses callback_allowlist entries: a CIDR, a single IP, or a
// host name.
func ParseAllowlist(entries []string) (Allowlist, error) {
	var a Allowlist
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			a.Prefixes = append(a.Prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			a.Prefixes = append(a.Prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if strings.ContainsAny(e, "/: ") {
			return Allowlist{}, fmt.Errorf("entry %q is neither a CIDR, an IP nor a host name", e)
		}
		a.Hosts = append(a.Hosts, strings.ToLower(strings.TrimSuffix(e, ".")))
	}
	return a, nil
}

// AllowedAddr reports whether ip may be dialled.
func (p Policy) AllowedAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, pre := range p.Allow.Prefixes {
		if pre.Contains(ip) {
			return true
		}
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return false
		}
	}
	if ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	private := ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast()
	for _, pre := range specialPrefixes {
		if pre.Contains(ip) {
			private = true
		}
	}
	return !private || p.AllowPrivate
}

// AllowedHost reports whether a host name is explicitly allowlisted.
func (p Policy) AllowedHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.Allow.Hosts {
		if h == host {
			return true
		}
	}
	return false
}

// CheckCallbackURL validates an agent_callback_url at provision time: an
// absolute http(s) URL without user info, query or fragment, whose host (if
// it is a literal address or localhost) the policy allows. Names are checked
// again after DNS resolution at dial time. It returns the normalised base URL.
func (p Policy) CheckCallbackURL(raw string) (string, *contract.Error) {
	bad := func(format string, args ...any) (string, *contract.Error) {
		return "", contract.BadRequest(contract.CodeInvalidCallbackURL, format, args...)
	}
	if raw == "" {
		return bad("agent_callback_url is required")
	}
	if len(raw) > 2048 {
		return bad("agent_callback_url is longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("agent_callback_url is not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("agent_callback_url must be an absolute http or https URL")
	case u.Host == "" || u.Opaque != "":
		return bad("agent_callback_url has no host")
	case u.User != nil:
		return bad("agent_callback_url must not contain user info")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("agent_callback_url must not contain a fragment")
	case u.RawQuery != "" || u.ForceQuery:
		return bad("agent_callback_url must not contain a query")
	}
	host := u.Hostname()
	if p.AllowedHost(host) {
		return raw, nil
	}
	notAllowed := contract.Errorf(422, contract.CodeInvalidCallbackURL, "agent_callback_url host %q is not a public address", host)
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if !p.AllowedAddr(ip) {
			return "", notAllowed
		}
	} else if lh := strings.ToLower(strings.TrimSuffix(host, ".")); lh == "localhost" || strings.HasSuffix(lh, ".localhost") {
		if !p.AllowedAddr(netip.MustParseAddr("127.0.0.1")) {
			return "", notAllowed
		}
	}
	return raw, nil
}
