// Package runs keeps what one agent process knows of its own runs: the
// registry of runs it has claimed and not yet settled (so that the reaper
// never takes a live run's claim), what can be said of another claim's
// owner (Judge), the triggers a run is started by, and the ledger lines
// that record a run's steps.
package runs
