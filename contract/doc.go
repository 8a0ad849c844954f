// Package contract holds the wire contract shared by the agent, NAS and the
// relay: the request and response bodies of every endpoint, the error body and
// its codes, the cron_fire token claims, header names, the strict JSON decoder
// every server reads bodies with, the strict fire_at time format, and the
// Standard Webhooks v1 signature that protects the relay route.
//
// It depends on the standard library and the JWT claims type only.
package contract
