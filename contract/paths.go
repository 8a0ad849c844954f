package contract

// HTTP paths of the NAS service and the agent.
const (
	PathProvision = "/api/agent-cron/provision"
	PathCancel    = "/api/agent-cron/cancel"
	PathList      = "/api/agent-cron/list"
	PathArmed     = "/api/agent-cron/armed"
	// PathFailedFiresAck is where an agent acknowledges the failed fires
	// list reported, so they are no longer listed.
	PathFailedFiresAck = "/api/agent-cron/failed-fires/ack"
	PathRelay          = "/api/agent-cron/relay"
	PathJWKS           = "/.well-known/jwks.json"
	PathFire           = "/api/cron/fire"
	PathHealthz        = "/healthz"
	PathReadyz         = "/readyz"
	PathMetrics        = "/metrics"

	// Operator routes, served on NAS's internal listener.
	PathOperatorInstanceStop  = "/api/operator/instances/{instance_id}/stop"
	PathOperatorInstanceStart = "/api/operator/instances/{instance_id}/start"
	PathOperatorAgentCancel   = "/api/operator/agents/{agent_id}/cancel-all"
	// PathOperatorAgentDisable and PathOperatorAgentEnable are the kill
	// switch of one agent.
	PathOperatorAgentDisable = "/api/operator/agents/{agent_id}/disable"
	PathOperatorAgentEnable  = "/api/operator/agents/{agent_id}/enable"
	// PathOperatorAgentRekey retires every cron key of an agent's direct
	// jobs (chronos agent rekey).
	PathOperatorAgentRekey = "/api/operator/agents/{agent_id}/rekey"
	PathOperatorDLQ        = "/api/operator/dlq"
	PathOperatorDLQReplay  = "/api/operator/dlq/replay"
)

// Header names used on the wire.
const (
	HeaderAuthorization     = "Authorization"
	HeaderRetryAfter        = "Retry-After"
	HeaderContentType       = "Content-Type"
	HeaderWebhookID         = "webhook-id"
	HeaderWebhookTimestamp  = "webhook-timestamp"
	HeaderWebhookSignature  = "webhook-signature"
	MediaTypeJSON           = "application/json"
	BearerPrefix            = "Bearer "
	DefaultMaxBodyBytes     = 64 << 10
	DefaultMaxBulkBodyBytes = 4 << 20
	// MaxListLimit is the largest page of list when a limit is given;
	// larger limits are clamped to it. Without a limit list answers every
	// armed job in one page.
	MaxListLimit = 100
	// MaxFailedFires is the most failed fires one list answer reports
	// (oldest first) and the most schedule ids one ack takes.
	MaxFailedFires           = 1000
	JobIDPattern             = `^[A-Za-z0-9._-]{1,128}$`
	DefaultFireAtPastSkewSec = 30
)
