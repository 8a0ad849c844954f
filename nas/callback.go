package nas

// NAS's calls to agents go through package agentcall, which a chronos relay
// process delivering direct fires shares: the callback address policy, the
// SSRF-safe client and the reading of an agent's answer. What is here keeps
// NAS's names for them.

import (
	"context"
	"net/netip"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
)

// ErrAddressNotAllowed is returned (wrapped) when a callback resolves to an
// address the SSRF policy refuses.
var ErrAddressNotAllowed = agentcall.ErrAddressNotAllowed

// CallbackPolicy decides which addresses agent callbacks may reach (see
// agentcall.Policy).
type CallbackPolicy struct {
	// AllowPrivate lets loopback, private and link-local addresses through
	// (development only); metadata, unspecified and multicast stay refused.
	AllowPrivate bool
	// Allow lists prefixes and host names that are always allowed.
	Allow agentcall.Allowlist
}

// policy returns p as package agentcall has it.
func (p CallbackPolicy) policy() agentcall.Policy {
	return agentcall.Policy{AllowPrivate: p.AllowPrivate, Allow: p.Allow}
}

// AllowedAddr reports whether ip may be dialled.
func (p CallbackPolicy) AllowedAddr(ip netip.Addr) bool { return p.policy().AllowedAddr(ip) }

// AllowedHost reports whether a host name is explicitly allowlisted.
func (p CallbackPolicy) AllowedHost(host string) bool { return p.policy().AllowedHost(host) }

// CheckCallbackURL validates an agent_callback_url at provision time (see
// agentcall.Policy.CheckCallbackURL) and returns the normalised base URL.
func (p CallbackPolicy) CheckCallbackURL(raw string) (string, *contract.Error) {
	return p.policy().CheckCallbackURL(raw)
}

// FireURL returns the URL NAS POSTs a fire to: the callback base URL with
// /api/cron/fire appended, unless it already ends with it.
func FireURL(callback string) string { return agentcall.FireURL(callback) }

// AgentCaller POSTs fires and reconcile requests to agents with the
// SSRF-safe client of agentcall.Caller.
type AgentCaller struct {
	*agentcall.Caller
}

// NewAgentCaller returns a caller bound to policy with a whole-call timeout
// (<= 0: DefaultDeliveryTimeout).
func NewAgentCaller(policy CallbackPolicy, timeout time.Duration) *AgentCaller {
	if timeout <= 0 {
		timeout = DefaultDeliveryTimeout
	}
	return &AgentCaller{Caller: agentcall.NewCaller(policy.policy(), timeout)}
}

// post is one guarded call to an agent (see agentcall.Caller.Post).
func (c *AgentCaller) post(ctx context.Context, target, token string, body []byte) agentcall.FireResult {
	return c.Post(ctx, target, token, body)
}

// ClassifyAnswer says what an agent's answer to a fire means (see
// agentcall.ClassifyAnswer; docs/operations.md has it as a table).
func ClassifyAnswer(status int, retryAfter string, body []byte) agentcall.FireResult {
	return agentcall.ClassifyAnswer(status, retryAfter, body)
}
