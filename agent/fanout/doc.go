// Package fanout runs the children of a fanout run: a durable plan (the
// resolved items, written before the first child starts), a scheduler that
// keeps at most Concurrency children running across the whole fanout and
// retries a failed child up to its attempts, and the parent's verdict
// (succeeded, partial or failed against the partial tolerance, and whether
// the reducer runs).
package fanout
