package contract

// ProvisionRequest is the body of POST /api/agent-cron/provision: arm (upsert)
// the one one-shot of job JobID at FireAt. DedupKey must be "job_id:fire_at".
type ProvisionRequest struct {
	JobID            string `json:"job_id"`
	FireAt           Time   `json:"fire_at"`
	AgentCallbackURL string `json:"agent_callback_url"`
	DedupKey         string `json:"dedup_key"`
	// FlexSeconds, when set, is the fire's flexible window: the agent
	// accepts delivery anywhere in [fire_at, fire_at + flex_seconds], 0 to
	// MaxFlexSeconds. NAS spreads such fires inside their windows. The fire
	// body and token carry fire_at unchanged.
	FlexSeconds int64 `json:"flex_seconds,omitempty"`
	// Delivery asks for a delivery mode: DeliveryDirect for direct delivery
	// under a per-job cron key, "" or DeliveryNAS for NAS-mediated delivery
	// (the default). NAS grants direct delivery only to agents its agents
	// file allows it for; otherwise the fire is armed NAS-mediated and the
	// answer says so.
	Delivery string `json:"delivery,omitempty"`
}

// MaxFlexSeconds is the widest flexible window a provision may ask for
// (one day).
const MaxFlexSeconds = 86400

// ProvisionResponse is the 200 answer to a provision: the schedule id of the
// armed one-shot (unchanged when the same fire_at is provisioned again).
type ProvisionResponse struct {
	ScheduleID string `json:"schedule_id"`
	FireAt     Time   `json:"fire_at"`
	// Armed is true when the one-shot is armed; kept for agents that read it.
	Armed bool `json:"armed"`
	// Delivery is the mode the fire is armed with, set when the provision
	// asked for one: DeliveryDirect or DeliveryNAS.
	Delivery string `json:"delivery,omitempty"`
	// CronKey is the job's cron key (unpadded base64url of CronKeyBytes
	// bytes) when Delivery is DeliveryDirect: the key its direct fire tokens
	// are signed with. It appears in this answer only: never in list, logs,
	// metrics or errors.
	CronKey string `json:"cron_key,omitempty"`
	// CronKeyID names CronKey; it is the `kid` of the tokens signed with it.
	CronKeyID string `json:"cron_key_id,omitempty"`
}

// CancelRequest is the body of POST /api/agent-cron/cancel.
type CancelRequest struct {
	JobID string `json:"job_id"`
}

// OKResponse is the {"ok": true} answer of cancel and operator actions.
type OKResponse struct {
	OK bool `json:"ok"`
}

// ArmedJob is one armed one-shot as NAS reports it to its agent.
type ArmedJob struct {
	JobID            string `json:"job_id"`
	FireAt           Time   `json:"fire_at"`
	ScheduleID       string `json:"schedule_id"`
	AgentCallbackURL string `json:"agent_callback_url"`
	// FlexSeconds is the fire's flexible window, when it has one.
	FlexSeconds int64 `json:"flex_seconds,omitempty"`
	// Delivery is DeliveryDirect for a fire armed for direct delivery;
	// omitted for NAS-mediated delivery. The key is never listed.
	Delivery string `json:"delivery,omitempty"`
}

// FailedFire is a fire NAS gave up on (dead-lettered), reported to the agent
// through the list endpoint so it can record it in its run ledger; it is
// reported on every list until the agent acknowledges it (POST
// /api/agent-cron/failed-fires/ack) or NAS's retention passes.
type FailedFire struct {
	JobID      string `json:"job_id"`
	FireAt     Time   `json:"fire_at"`
	ScheduleID string `json:"schedule_id"`
	Attempts   int    `json:"attempts"`
	Reason     string `json:"reason"`
	FailedAt   Time   `json:"failed_at"`
}

// ListResponse is the 200 answer of GET /api/agent-cron/list. NextCursor is
// null on the last page (always, without a limit). FailedFires is filled on
// the first page only: the agent's dead-lettered fires it has not
// acknowledged (FailedFiresAckRequest), oldest first.
type ListResponse struct {
	Armed       []ArmedJob   `json:"armed"`
	NextCursor  *string      `json:"next_cursor"`
	FailedFires []FailedFire `json:"failed_fires"`
	// Unarmed (first page only) lists the caller's jobs whose last fire
	// reached a final outcome and that are not armed again since.
	Unarmed []UnarmedJob `json:"unarmed,omitempty"`
	// Instance (first page only) is the state of the caller's instance.
	Instance *InstanceStatus `json:"instance,omitempty"`
}

// FailedFiresAckRequest is the body of POST /api/agent-cron/failed-fires/ack:
// the schedule ids of failed fires the agent has recorded (1 to
// MaxFailedFires of them).
type FailedFiresAckRequest struct {
	ScheduleIDs []string `json:"schedule_ids"`
}

// FailedFiresAckResponse is the 200 answer of an ack: how many of the ids
// were failed fires of the caller still listed (others are ignored).
type FailedFiresAckResponse struct {
	OK           bool `json:"ok"`
	Acknowledged int  `json:"acknowledged"`
}

// DesiredArm is one entry of the bulk PUT /api/agent-cron/armed body.
type DesiredArm struct {
	JobID            string `json:"job_id"`
	FireAt           Time   `json:"fire_at"`
	AgentCallbackURL string `json:"agent_callback_url"`
	DedupKey         string `json:"dedup_key"`
	// FlexSeconds is the fire's flexible window, as in ProvisionRequest.
	FlexSeconds int64 `json:"flex_seconds,omitempty"`
}

// PutArmedRequest is the full desired armed set of the calling agent: NAS
// arms what is missing or changed and cancels what is not listed.
type PutArmedRequest struct {
	Armed []DesiredArm `json:"armed"`
}

// PutArmedResponse says what a bulk PUT changed.
type PutArmedResponse struct {
	Armed     []ArmedJob `json:"armed"`     // every job now armed, with its schedule id
	Created   []string   `json:"created"`   // job ids newly armed
	Updated   []string   `json:"updated"`   // job ids re-armed at a new fire_at
	Cancelled []string   `json:"cancelled"` // job ids no longer armed
	Unchanged []string   `json:"unchanged"` // job ids already armed as desired
}

// RelayRequest is the body the relay POSTs, signed, to NAS's relay route when
// a one-shot is due.
type RelayRequest struct {
	ScheduleID string `json:"schedule_id"`
	AgentID    string `json:"agent_id"`
	JobID      string `json:"job_id"`
	FireAt     Time   `json:"fire_at"`
	Attempt    int    `json:"attempt"`
}

// Relay statuses: what NAS did with one relayed fire. All are final for the
// relay (a 200); retryable failures are 502/503 with an error body instead.
const (
	RelayDelivered       = "delivered"        // the agent accepted the fire (2xx)
	RelayDropped         = "dropped"          // the armed row is gone or was re-armed: a stale fire
	RelayInstanceStopped = "instance_stopped" // the operator stopped the agent instance
	RelayDuplicate       = "duplicate"        // this delivery id was already handled
	RelayRejected        = "rejected"         // the agent refused the fire for good (a definitive 4xx, or its token refused too often); dead-lettered
)

// RelayResponse is NAS's 200 answer to the relay.
type RelayResponse struct {
	Status string `json:"status"`
	// AgentStatus is the agent's own status when it answered one
	// ("accepted", "duplicate", "gone").
	AgentStatus string `json:"agent_status,omitempty"`
	// Reason says why a fire was rejected or dropped.
	Reason string `json:"reason,omitempty"`
}

// FireRequest is the body NAS POSTs to the agent's /api/cron/fire.
type FireRequest struct {
	JobID      string `json:"job_id"`
	FireAt     Time   `json:"fire_at"`
	ScheduleID string `json:"schedule_id"`
	Attempt    int    `json:"attempt"`
}

// Fire statuses answered by the agent.
const (
	FireAccepted  = "accepted"  // 202: the slot is claimed, the run follows
	FireDuplicate = "duplicate" // 200: the slot was already claimed or has passed
	FireGone      = "gone"      // 200: the agent has no such job
)

// FireResponse is the agent's answer to a fire.
type FireResponse struct {
	Status string `json:"status"`
	JobID  string `json:"job_id,omitempty"`
	RunID  string `json:"run_id,omitempty"`
}

// JWK is one public key of a JSON Web Key Set (RFC 7517), as NAS publishes it.
type JWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	Y   string `json:"y,omitempty"`
	N   string `json:"n,omitempty"`
	E   string `json:"e,omitempty"`
}

// JWKS is the body of GET /.well-known/jwks.json.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// HealthResponse is the body of /healthz and /readyz.
type HealthResponse struct {
	Status string            `json:"status"` // "ok" or "unavailable"
	Checks map[string]string `json:"checks,omitempty"`
}

// InstanceStateResponse answers the operator's stop/start of an agent instance.
type InstanceStateResponse struct {
	InstanceID string `json:"instance_id"`
	Stopped    bool   `json:"stopped"`
}

// AgentStateResponse answers the operator's disable/enable of an agent (the
// kill switch): while an agent is disabled NAS holds every fire of it in the
// store (none is delivered, none is lost) and answers its API calls 403
// invalid_client.
type AgentStateResponse struct {
	AgentID  string `json:"agent_id"`
	Disabled bool   `json:"disabled"`
}

// CancelAllResponse answers the operator's cancel-all for one agent.
type CancelAllResponse struct {
	AgentID   string `json:"agent_id"`
	Cancelled int    `json:"cancelled"`
}

// DeadLetter is one dead-lettered fire as operators see it.
type DeadLetter struct {
	ScheduleID string `json:"schedule_id"`
	AgentID    string `json:"agent_id"`
	JobID      string `json:"job_id"`
	FireAt     Time   `json:"fire_at"`
	Attempts   int    `json:"attempts"`
	Reason     string `json:"reason"`
	FailedAt   Time   `json:"failed_at"`
}

// DLQListResponse is the body of GET /api/operator/dlq.
type DLQListResponse struct {
	Entries    []DeadLetter `json:"entries"`
	NextCursor *string      `json:"next_cursor"`
}

// DLQReplayRequest asks NAS to deliver dead-lettered fires again: the listed
// schedule ids, or all of one agent's when AgentID is set and ScheduleIDs empty.
type DLQReplayRequest struct {
	ScheduleIDs []string `json:"schedule_ids,omitempty"`
	AgentID     string   `json:"agent_id,omitempty"`
}

// DLQReplayResponse says what a replay did with every entry it took out of
// the dead letter: Replayed counts the entries due again, listed in Entries;
// Dropped lists the entries it removed without re-arming, each with the
// reason. Missing are schedule ids another replay took between NAS's check
// and this replay (rare; never on the embedded store).
type DLQReplayResponse struct {
	Replayed int              `json:"replayed"`
	Entries  []DLQReplayEntry `json:"entries"`
	Dropped  []DLQDropped     `json:"dropped"`
	Missing  []string         `json:"missing"`
}

// DLQReplayEntry is one dead letter a replay re-armed, due now.
type DLQReplayEntry struct {
	ScheduleID string `json:"schedule_id"`
	AgentID    string `json:"agent_id"`
	JobID      string `json:"job_id"`
	FireAt     Time   `json:"fire_at"`
}

// DLQDropped is one dead letter a replay removed without re-arming it.
// Reason is a stable code (DLQDropJobArmedAgain); Description says it in
// words.
type DLQDropped struct {
	ScheduleID  string `json:"schedule_id"`
	AgentID     string `json:"agent_id"`
	JobID       string `json:"job_id"`
	FireAt      Time   `json:"fire_at"`
	Reason      string `json:"reason"`
	Description string `json:"description"`
}

// Reasons a replay drops a dead letter (DLQDropped.Reason).
const (
	// DLQDropJobArmedAgain: the job was armed again after the fire died
	// (its agent moved on to a later slot); re-arming the dead fire would
	// replace the newer one, so the entry leaves the dead letter unreplayed.
	DLQDropJobArmedAgain = "job_armed_again"
)
