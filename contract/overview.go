package contract

// PathOperatorOverview is the operator's overview of NAS: the store's
// gauges, the agents holding fires, fire lag, deliveries by outcome and
// stopped instances (the unarmed jobs and the dead letter have their own
// routes).
const PathOperatorOverview = "/api/operator/overview"

// OperatorOverview is the answer of GET /api/operator/overview.
type OperatorOverview struct {
	// GeneratedAt is when NAS read the numbers.
	GeneratedAt Time `json:"generated_at"`
	// Store holds the relay store's gauges (all NAS processes together).
	Store StoreGauges `json:"store"`
	// Agents are the agents holding at least one armed fire, in id order.
	Agents []AgentArmedCount `json:"agents"`
	// AgentsTruncated is true when more agents hold fires than listed.
	AgentsTruncated bool `json:"agents_truncated"`
	// AgentFlows is the flow control of each agent that has a policy of
	// its own (from the agents file or the operator's disable), a fire held
	// back, a lease in flight or a probe, in id order (all NAS processes
	// together).
	AgentFlows []AgentFlowState `json:"agent_flows"`
	// AgentFlowsTruncated is true when more agents have a flow state than
	// listed.
	AgentFlowsTruncated bool `json:"agent_flows_truncated"`
	// FireLag summarises the delay between fire_at and delivery, as seen by
	// this NAS process since it started.
	FireLag FireLagSummary `json:"fire_lag"`
	// Deliveries counts the fires this NAS process relayed since it
	// started, by outcome (chronos_nas_deliveries_total).
	Deliveries map[string]int64 `json:"deliveries"`
	// StoppedInstances are the instances an operator stopped, in id order.
	StoppedInstances []StoppedInstance `json:"stopped_instances"`
	// StoppedTruncated is true when more instances are stopped than listed.
	StoppedTruncated bool `json:"stopped_truncated"`
}

// StoreGauges are the relay store's gauges.
type StoreGauges struct {
	Armed      int64 `json:"armed"`
	DueBacklog int64 `json:"due_backlog"`
	Leased     int64 `json:"leased"`
	DeadLetter int64 `json:"dead_letter"`
	// Held counts due fires held back by flow control
	// (chronos_relay_held_fires).
	Held int64 `json:"held"`
	// Probing counts agents probed because they did not answer
	// (chronos_relay_probing_agents).
	Probing int64 `json:"probing"`
}

// AgentFlowState is one agent's flow control as the store has it.
type AgentFlowState struct {
	AgentID string `json:"agent_id"`
	// InFlight counts the agent's deliveries in flight (unexpired leases).
	InFlight int `json:"in_flight"`
	// Held counts its due fires held back.
	Held int `json:"held"`
	// Probing says a delivery found it not answering and none was
	// delivered since: its fires go out one at a time.
	Probing bool `json:"probing"`
	// Failures counts the deliveries in a row that found it not answering.
	Failures int `json:"failures"`
	// GateUntil, when set, is when its next fire may go out (a hold after
	// it did not answer, or its rate).
	GateUntil *Time `json:"gate_until,omitempty"`
	// Parallelism is the most deliveries in flight it gets (its own, else
	// relay.per_agent.parallelism).
	Parallelism int `json:"parallelism"`
	// Rate is the most deliveries per second it gets (its own, else
	// relay.per_agent.rate); 0: unlimited.
	Rate float64 `json:"rate"`
	// Disabled says its fires are held and its calls refused (the kill
	// switch).
	Disabled bool `json:"disabled"`
	// DisabledByFile says the agents file disables it: only the file can
	// enable it again.
	DisabledByFile bool `json:"disabled_by_file"`
}

// AgentArmedCount is one agent and how many fires it holds armed.
type AgentArmedCount struct {
	AgentID string `json:"agent_id"`
	Armed   int64  `json:"armed"`
}

// FireLagSummary is the fire lag histogram read as percentiles (estimated
// within their bucket, as Prometheus's histogram_quantile does); the
// percentiles are null before the first delivery.
type FireLagSummary struct {
	Count      uint64   `json:"count"`
	P50Seconds *float64 `json:"p50_seconds"`
	P90Seconds *float64 `json:"p90_seconds"`
	P99Seconds *float64 `json:"p99_seconds"`
}

// StoppedInstance is one instance an operator stopped.
type StoppedInstance struct {
	InstanceID string `json:"instance_id"`
	// StoppedAt is when it was stopped, when NAS recorded it.
	StoppedAt *Time `json:"stopped_at,omitempty"`
}

// PathOperatorSession is the operator dashboard's browser session: POST
// trades the operator token for a session cookie, DELETE clears it.
const PathOperatorSession = "/api/operator/session"

// OperatorSessionRequest is the body of POST /api/operator/session.
type OperatorSessionRequest struct {
	// Token is the operator token.
	Token string `json:"token"`
}

// OperatorSessionResponse is the 200 answer of POST /api/operator/session,
// which also sets the session cookie.
type OperatorSessionResponse struct {
	// ExpiresAt is when the session ends.
	ExpiresAt Time `json:"expires_at"`
}
