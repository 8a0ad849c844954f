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
