// Package ledger is the agent's run ledger: one JSON line per state change of
// a run, appended to runs/YYYY-MM-DD.jsonl (the UTC day of the change) with
// O_APPEND, one write per line and an fsync, so lines from several processes
// never interleave and a line on disk survives a crash.
//
// Reading folds the lines of each run id into one Run, whose State is the last
// state recorded. Retention removes day files and run output older than a
// cut-off.
package ledger
