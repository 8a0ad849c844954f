// Package demo runs the whole of Chronos in one process for someone trying
// it: NAS on the embedded relay engine with a dispatcher, and an agent with
// its own home, all on 127.0.0.1 ephemeral ports with signing keys made in
// memory, and a few sample jobs. Every step of every fire is narrated as it
// happens (armed → relayed → token verified → claimed → ran → re-armed),
// read from the components' own log records, and at the end a summary is
// printed from the agent's run ledger.
//
// Run is the entry point; the command line only parses flags and turns
// --for into a context deadline.
package demo
