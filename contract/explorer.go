package contract

// The operator dashboard's explorer routes: the delivery history, the
// agents, one agent's armed fires and recent deliveries, and the processes
// dispatching fires. Every number comes from the store, so every NAS process
// sharing it answers the same.
const (
	// PathOperatorHistory is the delivery history over the last hour or day
	// and the fires due in the next 24 hours.
	PathOperatorHistory = "/api/operator/history"
	// PathOperatorAgents lists the agents NAS knows.
	PathOperatorAgents = "/api/operator/agents"
	// PathOperatorAgent is one agent: its state and recent deliveries.
	PathOperatorAgent = "/api/operator/agents/{agent_id}"
	// PathOperatorAgentArmed pages one agent's armed fires, next first.
	PathOperatorAgentArmed = "/api/operator/agents/{agent_id}/armed"
	// PathOperatorProcesses lists the processes dispatching fires.
	PathOperatorProcesses = "/api/operator/processes"
)

// History windows (the window query parameter of PathOperatorHistory).
const (
	HistoryWindowHour = "hour"
	HistoryWindowDay  = "day"
)

// OperatorHistory is the answer of GET /api/operator/history.
type OperatorHistory struct {
	GeneratedAt Time `json:"generated_at"`
	// Window is "hour" (60 points of a minute) or "day" (144 points of ten
	// minutes).
	Window string `json:"window"`
	// StepSeconds is the length of each point.
	StepSeconds int `json:"step_seconds"`
	// Points are the window's steps, oldest first, each present even when
	// nothing happened in it.
	Points []HistoryPoint `json:"points"`
	// Totals sums the points' outcomes.
	Totals map[string]int64 `json:"totals"`
	// Due counts the armed fires due in each hour of the next 24, from
	// DueFrom.
	Due []int64 `json:"due"`
	// DueFrom is the start of the first hour of Due.
	DueFrom Time `json:"due_from"`
	// DeadLetterTruncated is true when the dead letter held more entries
	// than were read to count DeadLettered.
	DeadLetterTruncated bool `json:"dead_letter_truncated"`
	// LagP50Seconds and LagP99Seconds estimate the lag of the window's
	// delivered fires; null when none was delivered.
	LagP50Seconds *float64 `json:"lag_p50_seconds"`
	LagP99Seconds *float64 `json:"lag_p99_seconds"`
}

// HistoryPoint is one step of the delivery history.
type HistoryPoint struct {
	// At is the start of the step.
	At Time `json:"at"`
	// Outcomes counts delivery attempts by outcome: delivered, retry,
	// rejected, dropped, instance_stopped.
	Outcomes map[string]int64 `json:"outcomes"`
	// Retries counts the attempts that were a retry.
	Retries int64 `json:"retries"`
	// DeadLettered counts the fires that went to the dead letter (and are
	// still there).
	DeadLettered int64 `json:"dead_lettered"`
	// LagP50Seconds and LagP99Seconds estimate the delivered fires' lag
	// after fire_at; null when none was delivered.
	LagP50Seconds *float64 `json:"lag_p50_seconds"`
	LagP99Seconds *float64 `json:"lag_p99_seconds"`
}

// OperatorAgents is the answer of GET /api/operator/agents.
type OperatorAgents struct {
	// Agents are in id order.
	Agents []AgentSummary `json:"agents"`
	// Total counts the agents the query matches.
	Total      int     `json:"total"`
	NextCursor *string `json:"next_cursor"`
}

// AgentSummary is one agent as the explorer lists it.
type AgentSummary struct {
	AgentID string `json:"agent_id"`
	// Armed counts its armed fires.
	Armed int64 `json:"armed"`
	// LastDelivery is its newest delivery attempt, when one is kept.
	LastDelivery *DeliveryAttempt `json:"last_delivery,omitempty"`
	// Flow is its flow control.
	Flow AgentFlowState `json:"flow"`
	// State says in one word what holds its fires: delivering, limited,
	// waiting, probing, disabled.
	State string `json:"state"`
}

// DeliveryAttempt is one delivery attempt of a fire.
type DeliveryAttempt struct {
	JobID      string `json:"job_id"`
	ScheduleID string `json:"schedule_id"`
	FireAt     Time   `json:"fire_at"`
	Attempt    int    `json:"attempt"`
	// Outcome is delivered, retry, rejected, dropped or instance_stopped.
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// LagSeconds is how long after fire_at the attempt ended.
	LagSeconds float64 `json:"lag_seconds"`
	At         Time    `json:"at"`
}

// OperatorAgent is the answer of GET /api/operator/agents/{agent_id}.
type OperatorAgent struct {
	Agent AgentSummary `json:"agent"`
	// Recent are its recent delivery attempts, newest first (up to 100).
	Recent []DeliveryAttempt `json:"recent"`
}

// AgentArmedPage is the answer of GET /api/operator/agents/{agent_id}/armed.
type AgentArmedPage struct {
	// Armed are the fires, next first (fire_at, then job id).
	Armed []ArmedFire `json:"armed"`
	// Total counts the armed fires the query matches.
	Total      int     `json:"total"`
	NextCursor *string `json:"next_cursor"`
}

// ArmedFire is one armed fire.
type ArmedFire struct {
	JobID      string `json:"job_id"`
	ScheduleID string `json:"schedule_id"`
	FireAt     Time   `json:"fire_at"`
	InstanceID string `json:"instance_id"`
	// Attempt is the attempts made so far (0: not yet due).
	Attempt int    `json:"attempt"`
	Direct  bool   `json:"direct"`
	DueAt   Time   `json:"due_at"`
	Error   string `json:"last_error,omitempty"`
}

// OperatorProcesses is the answer of GET /api/operator/processes.
type OperatorProcesses struct {
	// Processes are those that beat in the last AliveWithinSeconds.
	Processes          []DispatchProcess `json:"processes"`
	AliveWithinSeconds int               `json:"alive_within_seconds"`
}

// DispatchProcess is one process running dispatchers: NAS itself ("nas")
// or a chronos relay process ("relay").
type DispatchProcess struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	Dispatchers int    `json:"dispatchers"`
	StartedAt   Time   `json:"started_at"`
	BeatAt      Time   `json:"beat_at"`
	// LastClaim is when it last took a fire to deliver; null when none.
	LastClaim *Time `json:"last_claim"`
	// Delivered counts the fires it delivered since it started.
	Delivered int64 `json:"delivered"`
}
