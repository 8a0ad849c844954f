package localapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
)

// CodeMisdirected (421): the request's Host is not a name of this
// listener, so it may come from a page that rebound a name of its own to
// the agent's address (DNS rebinding); nothing is read or changed.
const CodeMisdirected = "misdirected_request"

// hostNames is the set of Host names a request may carry: localhost, the
// loopback addresses, the address the connection arrived on, and the names
// and addresses the server was given (Options.Hosts).
type hostNames map[string]struct{}

// newHostNames normalises names (case, brackets, a trailing dot; a port is
// dropped) into the set of extra names.
func newHostNames(names []string) hostNames {
	h := hostNames{}
	for _, n := range names {
		if k := hostKey(n); k != "" {
			h[k] = struct{}{}
		}
	}
	return h
}

// hostKey is the comparable form of a Host header's or a configured name's
// host part: lower case, without port, brackets or a trailing dot; an IP
// address in its canonical text. A port that is not a number makes it "",
// which names nothing.
func hostKey(host string) string {
	host = strings.TrimSpace(host)
	if h, port, err := net.SplitHostPort(host); err == nil {
		if strings.Trim(port, "0123456789") != "" {
			return "" // not a port: no name of ours
		}
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().WithZone("").String()
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// allowed reports whether r may be served: it came over a Unix socket, or
// its Host names localhost, a loopback address, the local address the
// connection arrived on, or one of h.
func (h hostNames) allowed(r *http.Request) bool {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if _, unix := local.(*net.UnixAddr); unix {
		return true
	}
	key := hostKey(r.Host)
	if key == "" {
		return false
	}
	if key == "localhost" {
		return true
	}
	if ip, err := netip.ParseAddr(key); err == nil {
		if ip.IsLoopback() {
			return true
		}
		if tcp, ok := local.(*net.TCPAddr); ok {
			if lip, ok := netip.AddrFromSlice(tcp.IP); ok && lip.Unmap() == ip {
				return true
			}
		}
	}
	_, ok := h[key]
	return ok
}

// checkHost refuses, before anything else is done, a request whose Host
// is not a name of this listener (see hostNames.allowed).
func (s *Server) checkHost(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !s.hosts.allowed(r) {
			host := r.Host
			if len(host) > 100 {
				host = host[:100] + "…"
			}
			s.log.Warn("local api request refused: foreign Host", "host", host, "remote", r.RemoteAddr, "path", r.URL.Path)
			return contract.Errorf(http.StatusMisdirectedRequest, CodeMisdirected,
				"Host %q is not a name of this agent's local API: use its ui_listen address, localhost or a loopback address, or add the name to ui_hosts", host)
		}
		return next(c)
	}
}
