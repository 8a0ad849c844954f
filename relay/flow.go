package relay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Flow control keeps agents apart: every engine bounds, in the store and so
// across every process that shares it, how many fires each agent has in
// flight and how fast they go out, and holds back the fires of an agent that
// is not answering or that an operator disabled. A fire held back stays an
// armed row (StateArmed) in the store, out of the claimable queue, in due
// order per agent; it takes no lease, no dispatcher capacity and no room in
// another agent's claim.
//
// A Claim takes due fires in due order. For each candidate of agent A, with
// A's AgentPolicy filled from the claim's Flow, the fire is held instead of
// leased when:
//
//   - A is disabled;
//   - A's gate has not passed (a Down delivery's hold, or the next slot of
//     A's rate);
//   - A is probing (a Down delivery found it not answering, and no delivery
//     of it was acked since) and has a lease in flight;
//   - A has Parallelism unexpired leases (in any process).
//
// A claim never leases more of A's fires than A's room, so one batch is
// never filled with one agent's fires while others are due. Held fires
// return to the queue, in due order, as room frees: when one of A's leases
// ends (Ack, Nack, Down, Kill, a cancel or a re-arm of a leased one-shot,
// Reap of an expired lease), when A's gate passes (NextDue counts it as a
// due time), when A's policy changes (SetAgentPolicy: enable), and at every
// Reap for any agent with room (the safety net). An Ack ends A's probing.

// Flow is a claim's default flow control: what an agent whose AgentPolicy
// leaves a field zero gets.
type Flow struct {
	// Parallelism bounds the unexpired leases one agent holds at once; 0
	// leaves it unbounded.
	Parallelism int
	// Rate bounds the fires claimed for one agent per second (spaced
	// 1/Rate apart); 0 leaves it unbounded.
	Rate float64
}

// AgentPolicy is one agent's own flow control, kept in the store so that
// every process sharing it applies the same. A zero field takes the
// claim's Flow.
type AgentPolicy struct {
	// Parallelism bounds the agent's fires in flight; 0: Flow.Parallelism.
	Parallelism int
	// Rate bounds the agent's fires per second; 0: Flow.Rate.
	Rate float64
	// Disabled holds every fire of the agent (the operator's kill switch)
	// until it is enabled again; nothing is lost.
	Disabled bool
}

// Check reports a policy field out of range.
func (p AgentPolicy) Check() error {
	switch {
	case p.Parallelism < 0:
		return fmt.Errorf("parallelism %d must not be negative", p.Parallelism)
	case p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0):
		return fmt.Errorf("rate %v must be a positive number", p.Rate)
	}
	return nil
}

// Effective returns p with its zero fields taken from f.
func (p AgentPolicy) Effective(f Flow) AgentPolicy {
	if p.Parallelism == 0 {
		p.Parallelism = f.Parallelism
	}
	if p.Rate == 0 {
		p.Rate = f.Rate
	}
	return p
}

// AgentFlow is what a store knows of one agent's flow control.
type AgentFlow struct {
	AgentID string
	// Policy is the agent's own policy (zero fields: the defaults).
	Policy AgentPolicy
	// InFlight counts the agent's unexpired leases.
	InFlight int
	// Held counts the agent's due fires held back by flow control.
	Held int
	// Probing says a delivery found the agent not answering and none was
	// acked since: its fires go out one at a time.
	Probing bool
	// Failures counts the deliveries in a row that found it not answering.
	Failures int
	// GateUntil, when after now, is when its next fire may be claimed (a
	// hold after a Down delivery, or its rate).
	GateUntil time.Time
}

// Flows is the part of an engine that keeps agents' flow control.
type Flows interface {
	// SetAgentPolicy stores agentID's policy (the zero policy removes
	// it); a policy that fails Check is refused and changes nothing. Fires
	// it no longer holds back return to the queue at once.
	SetAgentPolicy(ctx context.Context, agentID string, p AgentPolicy) error
	// AgentFlow reports agentID's flow state (a zero AgentFlow with the id
	// for an agent the store knows nothing of).
	AgentFlow(ctx context.Context, agentID string) (AgentFlow, error)
	// AgentFlows reports every agent with a policy of its own, a held
	// fire or a probe, in agent id order.
	AgentFlows(ctx context.Context) ([]AgentFlow, error)
	// AgentPhase returns agentID's spreading phase in [0, 1): assigned on
	// first use from a store-wide sequence (the van der Corput sequence, so
	// any number of agents is spread evenly) and stable after that.
	AgentPhase(ctx context.Context, agentID string) (float64, error)
}

// ErrInvalidPolicy wraps a policy SetAgentPolicy refused.
var ErrInvalidPolicy = errors.New("relay: invalid agent policy")

// VanDerCorput returns the n-th element (n >= 1) of the base-2 van der
// Corput sequence: 1/2, 1/4, 3/4, 1/8, 5/8, ... Any prefix of it is spread
// over [0, 1) with a gap of at most twice the even one.
func VanDerCorput(n uint64) float64 {
	var q, bk float64 = 0, 0.5
	for n > 0 {
		if n&1 == 1 {
			q += bk
		}
		n >>= 1
		bk /= 2
	}
	return q
}

// FlexDue returns when a fire with a flexible window is due: fireAt plus
// phase times the window less its slack, in whole milliseconds. The slack,
// the window's last tenth (at most FlexSlack), is left for the delivery
// itself and a retry, so that a fire spread to the end of its window still
// reaches its agent inside it.
func FlexDue(fireAt time.Time, flex time.Duration, phase float64) time.Time {
	if flex <= 0 || phase <= 0 {
		return fireAt
	}
	span := flex - min(flex/10, FlexSlack)
	off := time.Duration(min(phase, 1) * float64(span)).Truncate(time.Millisecond)
	return fireAt.Add(off)
}

// FlexSlack bounds the end of a flexible window that FlexDue keeps free.
const FlexSlack = 30 * time.Second

// MaxFlex is the widest flexible window a fire may have.
const MaxFlex = 24 * time.Hour
