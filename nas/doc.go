// Package nas is the NAS service of Chronos: the party agents arm one-shots
// with and the party that calls them back at fire time.
//
// The root package holds the domain: the Config with its defaults, agent
// identity verifiers (an agents file of token hashes and JWT access tokens),
// the provision / cancel / list / bulk logic on top of a relay.Engine, the
// relay route that turns a due one-shot into a signed cron_fire token and an
// outbound call to the agent, the operator actions (stop and start an
// instance, cancel an agent's jobs, the dead letter, unarmed jobs), the
// signing keys and their JWKS with rotation,
// the SSRF-safe agent caller, and metrics. The HTTP adapter lives in nas/http;
// cmd/chronos wires the parts together.
//
// Service builds and wires the domain's parts, each of one responsibility:
// AgentAPI (the agent API), Fires (the fire path, whose answer is a Verdict
// that nas/http writes to the wire and LocalDeliverer maps to the relay's
// outcome), Operator (the operator's actions), OperatorAuth (the operator's
// token and sessions), Explorer (the dashboard's views), Flow (the agents'
// flow control and kill switch) and SelfHeal (last fires, unarmed jobs,
// reconcile requests).
//
// Identity always comes from the caller's token, never from a body, path or
// header the caller controls: another agent's job is answered exactly as a
// missing one.
package nas
