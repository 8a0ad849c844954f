// Package relay is NAS's internal one-shot scheduler. It keeps every armed
// one-shot durably together with its due entry, hands due one-shots to
// dispatchers under a lease with a fencing token, retries failed deliveries
// with backoff and jitter, and dead-letters what keeps failing.
//
// The storage lives behind the Engine interface; relay/memory is the embedded
// engine for a single process and relay/redis the distributed one. Both pass
// the conformance suite in relay/relaytest.
package relay
