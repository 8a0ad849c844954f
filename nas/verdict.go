package nas

import "time"

// VerdictKind says what became of a fire NAS was handed.
//
//	Delivered, Dropped, InstanceStopped, Duplicate  final: the fire is done
//	Rejected                                        final: the fire is dead-lettered
//	Retry                                           not taken now: deliver it again later
//
// The zero VerdictKind is not a verdict; it is read as Retry, so that a
// fire is never lost to it.
type VerdictKind uint8

// Verdict kinds.
const (
	// VerdictDelivered: the agent took the fire.
	VerdictDelivered VerdictKind = iota + 1
	// VerdictDropped: the fire's job is no longer armed, or was re-armed
	// since (Reason says which); the agent is not called.
	VerdictDropped
	// VerdictInstanceStopped: the operator stopped the fire's instance;
	// the agent is not called.
	VerdictInstanceStopped
	// VerdictDuplicate: the delivery was handed to NAS before; the agent
	// is not called again.
	VerdictDuplicate
	// VerdictRejected: the agent refused the fire for good (Reason says
	// how), or the fire cannot be signed.
	VerdictRejected
	// VerdictRetry: the agent did not take the fire now (Reason,
	// RetryAfter, AgentDown).
	VerdictRetry
)

// Verdict is NAS's answer to one fire, before any wire: the relay route
// writes it as its HTTP answer and a dispatcher in NAS's own process turns it
// into the relay's outcome (LocalDeliverer), so both paths end a fire alike.
type Verdict struct {
	Kind VerdictKind
	// AgentStatus, for Delivered, is the agent's status word when it is one
	// NAS reports back (contract.FireAccepted, FireDuplicate, FireGone,
	// FireRefreshed), else "".
	AgentStatus string
	// Reason says why a fire was Dropped, Rejected or is to be retried.
	Reason string
	// RetryAfter, for Retry, is the least delay the agent asked for.
	RetryAfter time.Duration
	// AgentDown, for Retry, says the agent is not answering (see
	// agentcall.FireResult.AgentDown): the relay holds the agent's fires and
	// probes it.
	AgentDown bool
}
