// Package postgrese2e holds the end-to-end fault tests of the PostgreSQL
// relay: NAS and relay processes of the built binary share one real
// PostgreSQL (each test on a schema of its own, or on a cluster of its own
// when it stops the server) while the tests kill processes and restart
// PostgreSQL under them, checking that every fire an agent armed arrives
// and is claimed once, and that the agent API answers 503
// store_unavailable within 2 s while the database is away. The neighbour
// tests run NAS on its dispatch defaults with agents that answer slowly or
// not yet, and a schema emptied under NAS is reported as a lost store.
// CHRONOS_SOAK=1 lengthens the bursts.
package postgrese2e
