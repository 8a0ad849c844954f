// Package store keeps the agent's jobs in its home directory, jobs.json
// and the records that follow it, and serialises every change to them
// across processes.
//
// Every change runs under an exclusive flock on a separate lock file
// (jobs.lock); readers take a shared lock, so any number of processes
// sharing the directory see one sequence of generations. jobs.json holds
// the whole state as of its generation. A change that only alters existing
// jobs (a claim, a renewal, a run's end) appends one record to the journal,
// jobs.journal: a line holding just the jobs it changed, fdatasynced, so
// its cost does not grow with the number of jobs and it makes no file; a
// change that adds or removes jobs or chains, or finds the journal long,
// writes jobs.json whole again (a temporary file that is fsynced, renamed
// into place, and made durable by an fsync of the directory) and then
// empties the journal. Readers apply the records after jobs.json's
// generation in order; a store that has the previous state cached reads
// only the bytes appended since. A last line without its newline is what
// an append cut short by a crash left: it is no record, and the next
// change cuts it off. Compact folds the journal into jobs.json without
// holding the lock while it writes (the agent calls it every CompactEvery),
// and a store that wrote records compacts them when closed. Record files
// of earlier builds (jobs.<generation>.json) are still read, and folded
// by the first change.
//
// A file that cannot be decoded, or whose text is not
// exactly what it says (bytes that are not UTF-8, escapes of lone UTF-16
// surrogates, both of which JSON decoding would turn into U+FFFD and so
// change a command silently), is never overwritten:
// Update and View fail with ErrCorrupt and a copy is kept beside it as
// <name>.corrupt-<timestamp> for the operator (one copy per distinct
// content; a later corruption never replaces an earlier copy).
//
// jobs.json is read whole, so its size is capped (Options.MaxFile, default
// DefaultMaxFileBytes): a larger file is refused before it is read, with
// an error naming the file, its size, the limit and the setting that sets
// it. A store that read jobs.json good once keeps working when the file
// then turns bad under it (garbage, or an oversize file, written over
// it): reads answer from the last good jobs, and the next change writes
// them back, with the change, over the bad file, which is first kept
// aside as above; a warning is logged once per bad content. A store with
// no good read behind it refuses the file, as above. Health reports, for
// readiness checks, whether the store on disk can be read.
//
// The jobs it stores are package job's model; package agent holds the
// rules that decide what a fire does with them.
package store
