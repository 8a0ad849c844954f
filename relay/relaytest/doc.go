// Package relaytest is the conformance suite every relay.Engine must pass.
//
// An engine's tests call RunEngineSuite with a Factory that makes a fresh,
// empty engine per test. The main section runs on the real clock with short
// leases and delays and waits for engine state by polling it, never by
// sleeping blindly, so an engine that judges time by its own server's clock
// (Redis) can run it. Engines that take an injected clock also run a section
// on a Clock the tests step by hand, which pins exact boundaries: the
// millisecond a fire becomes due, the instant a lease expires.
package relaytest
