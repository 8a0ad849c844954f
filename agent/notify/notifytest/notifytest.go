// Package notifytest holds what tests of the webhook address policy share,
// wherever they drive it from (the agent's local API, the jobs commands):
// a resolver that answers from a table, and the host forms the policy
// refuses with the words it refuses them with.
package notifytest

import (
	"context"
	"net"
	"net/netip"
)

// Resolver answers from a map; a missing name does not resolve.
type Resolver map[string][]netip.Addr

// LookupNetIP implements the resolver the address policy takes.
func (r Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// Hooks is a resolver that knows hooks.internal (a loopback address) and
// hooks.public (a public one).
func Hooks() Resolver {
	return Resolver{
		"hooks.internal": {netip.MustParseAddr("127.0.0.1")},
		"hooks.public":   {netip.MustParseAddr("8.8.8.8")},
	}
}

// Refused is a webhook host the default policy refuses, with words the
// refusal must carry.
type Refused struct {
	Host, Says string
}

// RefusedHosts are the hosts the default policy refuses when a target is
// added, under Hooks: every numeric form of a loopback, private,
// link-local or unspecified address, localhost, and a name resolving to
// loopback.
var RefusedHosts = []Refused{
	{"127.0.0.1", "127.0.0.1 is not a public address (loopback)"},
	{"2130706433", "2130706433 is 127.0.0.1, not a public address (loopback)"},
	{"0x7f000001", "0x7f000001 is 127.0.0.1"},
	{"0177.0.0.1", "0177.0.0.1 is 127.0.0.1"},
	{"127.1", "127.1 is 127.0.0.1"},
	{"0x7f.1", "0x7f.1 is 127.0.0.1"},
	{"0", "0 is 0.0.0.0, not a public address (unspecified)"},
	{"0.0.0.0", "0.0.0.0 is not a public address (unspecified)"},
	{"127.0.0.1.", "127.0.0.1. is 127.0.0.1"},
	{"[::127.0.0.1]", "::127.0.0.1 is ::7f00:1, not a public address (it carries 127.0.0.1, loopback)"},
	{"[::ffff:127.0.0.1]", "is 127.0.0.1, not a public address (loopback)"},
	{"[::ffff:7f00:1]", "is 127.0.0.1, not a public address (loopback)"},
	{"0xa000001", "0xa000001 is 10.0.0.1, not a public address (private)"},
	{"2852039166", "2852039166 is 169.254.169.254, not a public address (link-local)"},
	{"localhost", "localhost is a loopback name"},
	{"hooks.internal", "hooks.internal resolves to 127.0.0.1, not a public address (loopback)"},
}
