package notify

import "time"

// EventChainBreakerOpen is the event of an alert raised when a chain
// class's circuit breaker opens. It goes to the chain targets of the
// agent's config whatever their event filter.
const EventChainBreakerOpen Event = "chain_breaker_open"

// BreakerAlert is what an alert of EventChainBreakerOpen says: the
// failure signature, the last run ids and when the class may run again.
type BreakerAlert struct {
	Class string `json:"class"`
	// Reason is the failure signature: why the breaker opened.
	Reason string `json:"reason"`
	// RunIDs are the last (up to 3) run ids of the failing chains.
	RunIDs   []string  `json:"run_ids"`
	OpenedAt time.Time `json:"opened_at"`
	// ResumeAt is the next safe resume time.
	ResumeAt time.Time `json:"resume_at"`
}
