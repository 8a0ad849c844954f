// Package runner executes a job's payload: the built-in shell and http
// runners, the Runner interface an embedding agent implements to add its own
// payload kinds, and a Registry that maps kinds to runners.
//
// A runner is given everything it needs in a Request (ids, the slot, the
// payload, where to write output, the deadline through its context) and
// reports a Result; it never touches the job store or the run ledger.
package runner
