package contract

// Delivery modes of a job's fires (ProvisionRequest.Delivery). NAS-mediated
// delivery is the default: NAS signs each fire with its own key (JWKS). In
// direct delivery the relay's dispatcher calls the agent itself and signs
// each fire under the job's own cron key, which NAS minted at provision and
// returned to the agent; NAS is then off the fire path.
const (
	// DeliveryNAS is NAS-mediated delivery (the default; "" means it too).
	DeliveryNAS = "nas"
	// DeliveryDirect is direct delivery under a per-job cron key.
	DeliveryDirect = "direct"
)

// ValidDelivery reports whether d is a delivery mode a provision may ask for
// ("" is the default, NAS-mediated).
func ValidDelivery(d string) bool {
	return d == "" || d == DeliveryNAS || d == DeliveryDirect
}

// Direct fire tokens. A direct token has the claims of a NAS fire token
// (FireClaims: iss NAS's issuer, aud Audience(instance), purpose cron_fire,
// job_id, fire_at, schedule_id, attempt, bh, jti, iat, nbf, exp) and the
// `typ` TokenTypeCronFire, but it is signed with HS256 under the job's cron
// key and its `kid` header is the key's id (CronKeyID). An agent verifies it
// with the key of the job it names and no other.
const (
	// DirectTokenAlg is the `alg` of a direct fire token.
	DirectTokenAlg = "HS256"
	// CronKeyBytes is the length of a cron key.
	CronKeyBytes = 32
	// CronKeyIDPrefix starts every cron key id.
	CronKeyIDPrefix = "ck_"
	// DirectTokenLifetimeSeconds is exp - iat of a direct fire token.
	DirectTokenLifetimeSeconds = 90
)

// ReconcileReasonRekey is the reason NAS gives when an operator re-keyed the
// agent (chronos agent rekey): the agent provisions each of its direct jobs
// again, and each answer carries the job's new cron key.
const ReconcileReasonRekey = "rekey"

// AgentRekeyResponse answers the operator's re-key of an agent (POST
// PathOperatorAgentRekey): cron keys of the agent minted before RekeyedAt
// are retired. NAS asks the agent's instances to reconcile (reason
// ReconcileReasonRekey), and each provision of a direct job then answers a
// new key; a fire armed under an old key keeps it until its job is
// provisioned again, so none is lost.
type AgentRekeyResponse struct {
	AgentID string `json:"agent_id"`
	// RekeyedAt is the agent's rekey floor.
	RekeyedAt Time `json:"rekeyed_at"`
}
