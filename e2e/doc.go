// Package e2e holds Chronos's end-to-end tests: the chronos binary, built once
// per test run, started as real processes (NAS on Redis, relay dispatchers,
// agent replicas) on loopback ports, and driven through faults. Each fault
// case asserts the agent's run ledger, not just exit codes. The README's
// commands and configuration blocks are run and checked here too, and the
// operator dashboard is driven in headless Chromium (internal/browsertest);
// CHRONOS_UPDATE_SCREENSHOTS=1 refreshes docs/operator-dashboard.png.
//
// By default the windows are short so that `make test` stays fast;
// CHRONOS_SOAK=1 stretches the exactly-once window to two minutes.
package e2e
