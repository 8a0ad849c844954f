// Package store keeps the agent's jobs in one file, jobs.json, inside the
// agent's home directory, and serialises every change to it across
// processes.
//
// Every change runs under an exclusive flock on a separate lock file
// (jobs.lock): the file is read, the change applied in memory, and the result
// written to a temporary file that is fsynced, renamed over jobs.json, and
// made durable by an fsync of the directory. Readers take a shared lock. Any
// number of processes sharing the directory therefore see one sequence of
// versions of the file. A file that cannot be decoded, or whose text is not
// exactly what it says (bytes that are not UTF-8, escapes of lone UTF-16
// surrogates, both of which JSON decoding would turn into U+FFFD and so
// change a command silently), is never overwritten:
// Update and View fail with ErrCorrupt and a copy is kept beside it as
// jobs.json.corrupt-<timestamp> for the operator (one copy per distinct
// content; a later corruption never replaces an earlier copy).
//
// The job model (Job, its policies and its claim state) lives here because it
// is what the file holds; package agent re-exports it and holds the rules
// that decide what a fire does.
package store
