// Package job is the agent's job model: a Job as jobs.json holds it, its
// kinds (plain, workflow, fanout), its schedule as written and how it is
// read, its policies (misfire, overlap, idempotency window, on interrupt,
// retry, repeat) with their names and defaults, and the claim record of a
// live run. It does no I/O: package store keeps jobs on disk, and package
// agent decides what a fire does with them.
//
// The JSON form of these types is the on-disk format of jobs.json: field
// names and tags are part of it.
package job
