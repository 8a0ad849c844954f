package ledger

// KindChain marks a line about a chain (started, spawned, refused, closed)
// or a chain class's breaker (opened, closed, reset) rather than a run:
// State names the event, JobID the chain (or the breaker's class) and
// RunID the event itself.
const KindChain = "chain"

// Chain events: the State of a KindChain line.
const (
	ChainStarted       State = "started"
	ChainSpawned       State = "spawned"
	ChainRefused       State = "refused"
	ChainCoolingDown   State = "cooling_down"
	ChainClosed        State = "closed"
	ChainStepSkipped   State = "step_skipped"
	ChainBreakerOpened State = "breaker_opened"
	ChainBreakerClosed State = "breaker_closed"
	ChainBreakerReset  State = "breaker_reset"
)

// ChainRef names a chain and, on a step's lines, the step's place in it.
type ChainRef struct {
	ID      string `json:"id"`
	Class   string `json:"class"`
	Stage   string `json:"stage,omitempty"`
	Depth   int    `json:"depth,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Step is the step's job id on a chain line about one step.
	Step string `json:"step,omitempty"`
}
