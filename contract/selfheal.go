package contract

import "github.com/golang-jwt/jwt/v5"

// Paths of the self-healing routes.
const (
	// PathReconcile is the agent's route NAS calls to ask for a reconcile
	// (after an operator starts the agent's instance again).
	PathReconcile = "/api/cron/reconcile"
	// PathOperatorUnarmed lists jobs NAS holds no armed fire for after their
	// last fire (operator route on NAS's internal listener).
	PathOperatorUnarmed = "/api/operator/unarmed"
)

// FireRefreshed is the agent's 200 answer to a refresh fire: a fire NAS's
// horizon made the agent arm before its job's real slot, at an instant that is
// not one of the job's slots. Nothing runs; the agent arms again.
const FireRefreshed = "refreshed"

// Last-fire outcomes: what became of a job's last fire, as NAS remembers it
// until the job is armed again (or cancelled).
const (
	// LastFireDelivered: the agent took the fire (2xx).
	LastFireDelivered = "delivered"
	// LastFireInstanceStopped: NAS dropped the fire because the operator had
	// stopped the agent's instance.
	LastFireInstanceStopped = "instance_stopped"
	// LastFireDeadLettered: the relay gave up on the fire (the agent refused
	// it, or the retries ran out); it is in the dead letter.
	LastFireDeadLettered = "dead_lettered"
)

// UnarmedJob is a job whose last fire reached a final outcome at NAS and
// that has not been armed again since. The agent's list shows its own (with
// no agent or instance id, at once); the operator route shows every agent's
// once they have been unarmed for unarmed_after.
type UnarmedJob struct {
	AgentID    string `json:"agent_id,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`
	JobID      string `json:"job_id"`
	// FireAt is the slot of the last fire, exactly as the agent armed it.
	FireAt     Time   `json:"fire_at"`
	ScheduleID string `json:"schedule_id"`
	// Outcome is LastFireDelivered, LastFireInstanceStopped or
	// LastFireDeadLettered; Reason says more (the dead letter's reason).
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// OutcomeAt is when NAS learned the outcome.
	OutcomeAt Time `json:"outcome_at"`
}

// UnarmedResponse is the body of GET /api/operator/unarmed.
type UnarmedResponse struct {
	// Unarmed lists the jobs left without an armed fire for longer than
	// UnarmedAfter, oldest outcome first.
	Unarmed []UnarmedJob `json:"unarmed"`
	// UnarmedAfter is NAS's unarmed_after setting (a Go duration).
	UnarmedAfter string `json:"unarmed_after"`
	// Truncated is true when there were more than the route lists at once.
	Truncated bool `json:"truncated"`
}

// InstanceStatus is what NAS knows of the calling agent's instance, on the
// first page of its list: whether the operator stopped it, and when it was
// last stopped and started. Fires of a stopped instance are dropped.
type InstanceStatus struct {
	InstanceID string `json:"instance_id"`
	Stopped    bool   `json:"stopped"`
	StoppedAt  *Time  `json:"stopped_at,omitempty"`
	StartedAt  *Time  `json:"started_at,omitempty"`
}

// Token constants of the cron_reconcile JWT NAS sends with a reconcile
// request; it is signed like fire tokens (same keys, issuer and audience).
const (
	// PurposeCronReconcile is the `purpose` claim of a reconcile token.
	PurposeCronReconcile = "cron_reconcile"
	// TokenTypeCronReconcile is the `typ` header of a reconcile token.
	TokenTypeCronReconcile = "cron-reconcile+jwt"
)

// ReconcileReasonInstanceStarted is the reason NAS gives when an operator
// started the agent's instance again.
const ReconcileReasonInstanceStarted = "instance_started"

// ReconcileReasonAgentEnabled is the reason NAS gives when an operator
// enabled the agent again (chronos agent enable): while it was disabled
// its calls were refused with 403 invalid_client.
const ReconcileReasonAgentEnabled = "agent_enabled"

// ReconcileRequest is the body NAS POSTs to the agent's /api/cron/reconcile.
type ReconcileRequest struct {
	InstanceID string `json:"instance_id"`
	Reason     string `json:"reason"`
}

// ReconcileStatusReconciling is the status of the agent's 202 answer.
const ReconcileStatusReconciling = "reconciling"

// ReconcileResponse is the agent's answer to a reconcile request.
type ReconcileResponse struct {
	Status string `json:"status"`
}

// ReconcileClaims are the claims of a cron_reconcile JWT: those of a fire
// token without the fire's own (job_id, fire_at, schedule_id, attempt); bh
// binds the token to the request body.
type ReconcileClaims struct {
	TokenClaims
	BodyHash string `json:"bh"`
}

var _ jwt.Claims = (*ReconcileClaims)(nil)
