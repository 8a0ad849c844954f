// Package relaytest is the conformance suite every relay.Engine must pass,
// and the suite of dispatcher behaviour every engine must support.
//
// An engine's tests call RunEngineSuite and RunDispatcherSuite with a Factory
// that makes a fresh, empty engine per test. The main sections run on the
// real clock with short leases and delays and wait for engine state by
// polling it, never by sleeping blindly, so an engine that judges time by
// its own server's clock (Redis) can run them. Engines that take an injected
// clock also run a section on a Clock the tests step by hand, which pins
// exact boundaries: the millisecond a fire becomes due, the instant a lease
// expires. Engines shared by several processes give Factory.Peer, and the
// dispatcher suite then checks what one process learns from another.
//
// The dispatcher suite drives real dispatchers and a real
// relay.HTTPDeliverer against RelayRoute, a stand-in for NAS's relay route
// that tests of other packages may use as well.
package relaytest
