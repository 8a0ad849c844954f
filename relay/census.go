package relay

import "context"

// AgentArmed is how many one-shots (armed or leased) one agent holds.
type AgentArmed struct {
	AgentID string
	Armed   int64
}

// Census is an optional part of an engine for the operator's overview: which
// agents hold one-shots and which instances are stopped. It reads the whole
// store, so it is for an operator's look, never for a hot path.
type Census interface {
	// ArmedByAgent returns up to max (<= 0: 1000) agents holding at least
	// one one-shot, in agent id order, with their counts, and reports
	// whether there were more.
	ArmedByAgent(ctx context.Context, max int) (agents []AgentArmed, more bool, err error)
	// StoppedInstances returns up to max (<= 0: 1000) instance ids an
	// operator stopped (Control.SetInstanceState) and did not start again,
	// in id order, and reports whether there were more.
	StoppedInstances(ctx context.Context, max int) (ids []string, more bool, err error)
}

// DefaultCensusMax is the max of a Census call given max <= 0.
const DefaultCensusMax = 1000

// CensusMax is the bound a Census implementation applies for max.
func CensusMax(max int) int {
	if max <= 0 {
		return DefaultCensusMax
	}
	return max
}
