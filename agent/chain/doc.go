// Package chain is the model of chained one-shots: a chain of one-shot jobs
// that a scout starts for one incident, whose steps spawn the next ones
// (action, verify, retry, monitor) and which closes itself when the work is
// done or a limit is hit.
//
// The package holds the records (Chain, Step, Breaker) and the rules that
// decide a start, a spawn, a step's end and a close from the records alone:
// no store, no clock of its own and no I/O, so every rule is a function of
// its inputs. The agent keeps the records in its store and applies these
// rules under the store's lock, which is what makes the limits, the
// de-duplication and the circuit breaker hold whatever a step does.
package chain
