package notify

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// AddressPolicy decides which addresses webhooks may reach. It is the one
// policy of a webhook's address: the same checks run when a target is
// added or edited (CheckHost, from ValidateTarget) and when a notification
// is sent (CheckHost on the URL's host, then Check on every address the
// connection is actually made to).
type AddressPolicy struct {
	// AllowPrivate lets loopback, private, link-local and other
	// non-public addresses through (a receiver on the same host or LAN).
	// Unspecified and multicast addresses stay refused.
	AllowPrivate bool
	// Allow lists prefixes that are always allowed.
	Allow []netip.Prefix
}

// ResolveTimeout bounds the resolution of one webhook host name when a
// target is checked.
const ResolveTimeout = 5 * time.Second

// Class says what kind of address an IP is to the address policy.
type Class string

// Classes of addresses. Only ClassPublic is reachable by default;
// ClassUnspecified and ClassMulticast never are; the others are with
// AddressPolicy.AllowPrivate.
const (
	ClassPublic      Class = "public"
	ClassUnspecified Class = "unspecified"
	ClassMulticast   Class = "multicast"
	ClassLoopback    Class = "loopback"
	ClassPrivate     Class = "private"
	ClassLinkLocal   Class = "link-local"
	ClassThisNetwork Class = "this network"
	ClassShared      Class = "shared address space (carrier-grade NAT)"
	ClassProtocol    Class = "IETF protocol assignment"
	ClassBenchmark   Class = "benchmarking"
	ClassReserved    Class = "reserved or broadcast"
	ClassNAT64       Class = "NAT64"
	ClassDocument    Class = "documentation"
	ClassSiteLocal   Class = "site-local"
)

// specialPrefixes are ranges that are never public though the netip
// predicates do not name them.
var specialPrefixes = []struct {
	prefix netip.Prefix
	class  Class
}{
	{netip.MustParsePrefix("0.0.0.0/8"), ClassThisNetwork},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassShared},
	{netip.MustParsePrefix("192.0.0.0/24"), ClassProtocol},
	{netip.MustParsePrefix("198.18.0.0/15"), ClassBenchmark},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved},
	{netip.MustParsePrefix("64:ff9b::/96"), ClassNAT64},
	{netip.MustParsePrefix("64:ff9b:1::/48"), ClassNAT64},
	{netip.MustParsePrefix("2001:db8::/32"), ClassDocument},
	{netip.MustParsePrefix("fec0::/10"), ClassSiteLocal},
}

// Prefixes of IPv6 addresses that carry an IPv4 one a host may route to.
var (
	compatPrefix = netip.MustParsePrefix("::/96")     // IPv4-compatible, ::a.b.c.d
	sixToFour    = netip.MustParsePrefix("2002::/16") // 6to4, 2002:aabb:ccdd::/48
)

// Classify says what kind of address ip is. An IPv4 address carried in an
// IPv6 one (IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d, or 6to4
// 2002:aabb:ccdd::) is classified as that IPv4 address, which is returned
// too (else the zero Addr). A zone is ignored.
func Classify(ip netip.Addr) (Class, netip.Addr) {
	ip = ip.WithZone("").Unmap()
	if ip.Is6() && !ip.IsUnspecified() && !ip.IsLoopback() {
		b := ip.As16()
		switch {
		case compatPrefix.Contains(ip):
			v4 := netip.AddrFrom4([4]byte(b[12:16]))
			return classOf(v4), v4
		case sixToFour.Contains(ip):
			v4 := netip.AddrFrom4([4]byte(b[2:6]))
			return classOf(v4), v4
		}
	}
	return classOf(ip), netip.Addr{}
}

// classOf classifies an address that carries no other.
func classOf(ip netip.Addr) Class {
	switch {
	case !ip.IsValid(), ip.IsUnspecified():
		return ClassUnspecified
	case ip.IsMulticast():
		return ClassMulticast
	case ip.IsLoopback():
		return ClassLoopback
	case ip.IsPrivate():
		return ClassPrivate
	case ip.IsLinkLocalUnicast():
		return ClassLinkLocal
	}
	for _, s := range specialPrefixes {
		if s.prefix.Contains(ip) {
			return s.class
		}
	}
	return ClassPublic
}

// refusal says why p refuses ip ("" when it does not): the class, and the
// IPv4 address ip carries if that is what was classified.
func (p AddressPolicy) refusal(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	class, inner := Classify(ip)
	for _, pre := range p.Allow {
		if pre.Contains(ip) || (inner.IsValid() && pre.Contains(inner)) {
			return ""
		}
	}
	switch class {
	case ClassPublic:
		return ""
	case ClassUnspecified, ClassMulticast:
	default:
		if p.AllowPrivate {
			return ""
		}
	}
	if inner.IsValid() {
		return fmt.Sprintf("it carries %s, %s", inner, class)
	}
	return string(class)
}

// Check returns nil if ip may be dialled, else an error wrapping
// ErrAddressNotAllowed that names ip and its class.
func (p AddressPolicy) Check(ip netip.Addr) error {
	if why := p.refusal(ip); why != "" {
		return fmt.Errorf("%w: %s is not a public address (%s)", ErrAddressNotAllowed, ip.WithZone("").Unmap(), why)
	}
	return nil
}

// Allowed reports whether ip may be dialled (Check returns nil).
func (p AddressPolicy) Allowed(ip netip.Addr) bool {
	return p.refusal(ip) == ""
}

// CheckHost checks a URL's host (without brackets or port) against p. A
// host that is an address in any form (see ParseHost) is checked as that
// address; localhost and *.localhost as loopback; any other name, with a
// resolver r, as each address it resolves to within ResolveTimeout. A
// refused address fails with ErrAddressNotAllowed, naming the host and the
// address; a host that looks numeric but is no address fails with
// ErrInvalidTarget. A name r cannot resolve now is accepted (the check at
// connection time still applies) and, when set, unresolved is told.
func (p AddressPolicy) CheckHost(ctx context.Context, host string, r Resolver, unresolved func(host string, err error)) error {
	ip, ok, err := ParseHost(host)
	if err != nil {
		return err
	}
	if ok {
		why, canon := p.refusal(ip), ip.WithZone("").Unmap()
		switch {
		case why == "":
			return nil
		case strings.EqualFold(host, canon.String()):
			return fmt.Errorf("%w: %s is not a public address (%s)", ErrAddressNotAllowed, host, why)
		default:
			return fmt.Errorf("%w: %s is %s, not a public address (%s)", ErrAddressNotAllowed, host, canon, why)
		}
	}
	lh := strings.ToLower(strings.TrimSuffix(host, "."))
	if lh == "localhost" || strings.HasSuffix(lh, ".localhost") {
		if !p.Allowed(netip.AddrFrom4([4]byte{127, 0, 0, 1})) {
			return fmt.Errorf("%w: %s is a loopback name", ErrAddressNotAllowed, host)
		}
		return nil
	}
	if r == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		if unresolved != nil {
			unresolved(host, err)
		}
		return nil
	}
	for _, a := range addrs {
		if why := p.refusal(a); why != "" {
			return fmt.Errorf("%w: %s resolves to %s, not a public address (%s)", ErrAddressNotAllowed, host, a.WithZone("").Unmap(), why)
		}
	}
	return nil
}

// ParseHost reads a URL's host (without port; brackets are dropped) as an
// IP address in every form a resolver, a dialer or a browser may take for
// one: dotted quads; IPv6 with an optional zone, IPv4-mapped
// (::ffff:127.0.0.1) or IPv4-compatible (::127.0.0.1); and the classic
// inet_aton forms (2130706433, 0x7f000001, 0177.0.0.1, 127.1, 0x7f.1, 0),
// with one trailing dot and in full-width digits. ok is false for a host
// name. A host whose last label is a number but that is no address
// (1.2.3.256, 1.2.3.4.5) fails with ErrInvalidTarget: resolvers disagree
// about what it is.
func ParseHost(host string) (ip netip.Addr, ok bool, err error) {
	h := foldWidth(host)
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return netip.Addr{}, false, fmt.Errorf("%w: url has no host", ErrInvalidTarget)
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip, true, nil
	}
	if strings.ContainsAny(h, ":%") {
		return netip.Addr{}, false, fmt.Errorf("%w: host %q is not a valid IP address", ErrInvalidTarget, host)
	}
	if ip, ok := parseLooseIPv4(h); ok {
		return ip, true, nil
	}
	if endsInNumber(h) {
		return netip.Addr{}, false, fmt.Errorf("%w: host %q ends in a number but is not an IP address", ErrInvalidTarget, host)
	}
	return netip.Addr{}, false, nil
}

// parseLooseIPv4 reads the inet_aton forms: one to four parts, each
// decimal, hex (0x) or octal (leading 0), the last filling the bytes left.
func parseLooseIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var out uint64
	for i, part := range parts {
		v, ok := parseNumber(part)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if v > 0xff {
				return netip.Addr{}, false
			}
			out = out<<8 | v
			continue
		}
		rest := uint(8 * (4 - i))
		if v >= 1<<rest {
			return netip.Addr{}, false
		}
		out = out<<rest | v
	}
	return netip.AddrFrom4([4]byte{byte(out >> 24), byte(out >> 16), byte(out >> 8), byte(out)}), true
}

// parseNumber reads one part of an inet_aton address.
func parseNumber(s string) (uint64, bool) {
	base := 10
	switch {
	case s == "":
		return 0, false
	case len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		s, base = s[2:], 16
		if s == "" {
			return 0, true
		}
	case len(s) > 1 && s[0] == '0':
		s, base = s[1:], 8
	}
	v, err := strconv.ParseUint(s, base, 32)
	return v, err == nil
}

// endsInNumber reports whether the last label of s is a decimal or hex
// number, as a URL parser decides a host must be an IPv4 address.
func endsInNumber(s string) bool {
	last := s[strings.LastIndexByte(s, '.')+1:]
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		return strings.Trim(last[2:], "0123456789abcdefABCDEF") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// foldWidth maps full-width forms and ideographic full stops to ASCII, as
// the IDNA mapping an HTTP client applies to a host does.
func foldWidth(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return r >= utf8.RuneSelf }) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\u3002' || r == '\uff0e' || r == '\uff61':
			return '.'
		case r >= '\uff01' && r <= '\uff5e':
			return r - 0xfee0
		}
		return r
	}, s)
}
