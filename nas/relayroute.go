package nas

// The relay route: the signed endpoint a relay process delivers each fire
// to. It verifies the call and decodes it, remembers its delivery id, and
// hands the fire to the fire path (fires.go), whose Verdict the HTTP layer
// writes.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/direct"
)

// RelayHeaders are the Standard Webhooks headers of a relay call.
type RelayHeaders struct {
	ID, Timestamp, Signature string
}

// deliveryTTL is how long a delivery id is remembered: longer than the whole
// window in which its signature verifies (the tolerance both ways).
const deliveryTTL = 2*contract.WebhookTolerance + time.Minute

// Relay handles one signed relay call: body is the exact request body. A
// forged, stale or altered call is a 401 and changes nothing, a body that
// is not a relay request a 400; a store that fails is an error. Else the
// answer is NAS's Verdict on the fire, which the HTTP layer writes: a final
// verdict as a 200 RelayResponse, a retry as agent_unavailable with its
// RetryAfter (503 when the agent is not answering, 502 when it answered
// another 5xx or refused the fire token). A refused fire token is retried
// until the call's attempt reaches relay.retry.max_auth_attempts.
func (s *Fires) Relay(ctx context.Context, h RelayHeaders, body []byte) (Verdict, error) {
	now := s.now()
	call, err := s.relayRequest(ctx, h, body, now)
	if err != nil {
		return Verdict{}, err
	}
	if call.attempt > 1 {
		s.metrics.retries.Inc()
	}
	// The key carries the attempt: an exact replay of a signed call repeats
	// both, while each new attempt is a new delivery.
	info, err := s.lookupDelivery(ctx, "relay:"+h.ID+":"+strconv.Itoa(call.attempt), &call)
	if err != nil {
		return Verdict{}, fmt.Errorf("relay: %w", err)
	}
	if v, settled := s.settleWithoutAgent(ctx, &call, info, nil); settled {
		return v, nil
	}
	if info.Row.Direct.IsDirect() {
		return s.relayDirect(ctx, &call, info.Row)
	}
	return s.deliver(ctx, &call, info.Row, now, nil)
}

// relayDirect delivers on the relay route the fire of a job armed for
// direct delivery, as NAS's own dispatchers do: signed under the job's cron
// key, never NAS's (the agent refuses NAS's token for such a job). Relay
// processes deliver such fires themselves; one older than direct delivery
// posts them here. A key that does not open is a rejection.
func (s *Fires) relayDirect(ctx context.Context, call *fireCall, row relay.OneShot) (Verdict, error) {
	dd, err := direct.New(direct.Config{
		Sealer: s.direct.sealer, Issuer: s.cfg.PublicURL, Caller: s.caller,
		MaxAuthAttempts: s.cfg.Relay.Retry.MaxAuthAttempts, Logger: s.log, Now: s.now,
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("relay: %w", err)
	}
	v, err := s.deliverDirect(ctx, dd, call, row, nil)
	if errors.Is(err, direct.ErrKeyDoesNotOpen) {
		return Verdict{Kind: VerdictRejected, Reason: err.Error()}, nil
	}
	return v, err
}

// relayRequest verifies a relay call's signature and decodes and checks its
// body.
func (s *Fires) relayRequest(ctx context.Context, h RelayHeaders, body []byte, now time.Time) (fireCall, error) {
	if err := contract.VerifyWebhook(contract.WebhookCall{ID: h.ID, Timestamp: h.Timestamp, Signature: h.Signature, Body: body}, contract.WebhookVerifyOptions{Keys: s.secrets, Now: now}); err != nil {
		s.log.WarnContext(ctx, "relay call refused", "reason", err.Error())
		return fireCall{}, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidSignature, "relay signature does not verify")
	}
	req, e := decodeRelayRequest(body)
	if e != nil {
		return fireCall{}, e
	}
	if req.ScheduleID == "" || req.AgentID == "" || req.FireAt.IsZero() || req.Attempt < 1 {
		return fireCall{}, contract.BadRequest(contract.CodeInvalidRequest, "schedule_id, agent_id, job_id, fire_at and an attempt of at least 1 are required")
	}
	if e := checkJobID(req.JobID); e != nil {
		return fireCall{}, e
	}
	return fireCall{scheduleID: req.ScheduleID, agentID: req.AgentID, jobID: req.JobID, fireAt: req.FireAt, attempt: req.Attempt}, nil
}

// decodeRelayRequest decodes a relay call's body as contract.DecodeBytes
// does. Dispatchers send exactly json.Marshal of the request, and a body that
// decodes and encodes back to the same bytes is one the strict decoder
// accepts with the same result (each key once, spelled as the wire spells
// it, nothing unknown, nothing null, a valid fire_at): that common case skips
// the strict decoder's token walk. Anything else gets its exact verdict.
func decodeRelayRequest(body []byte) (contract.RelayRequest, *contract.Error) {
	var req contract.RelayRequest
	if json.Unmarshal(body, &req) == nil {
		if again, err := json.Marshal(req); err == nil && bytes.Equal(again, body) {
			return req, nil
		}
	}
	req = contract.RelayRequest{}
	if e := contract.DecodeBytes(body, &req); e != nil {
		return contract.RelayRequest{}, e
	}
	return req, nil
}

// lookupDelivery records a delivery id and, the first time it is seen, reads
// the fire's row and whether its instance is stopped: in one call on an
// engine that offers relay.DeliveryLookup, else in up to three.
func (s *Fires) lookupDelivery(ctx context.Context, id string, call *fireCall) (relay.DeliveryInfo, error) {
	if lk, ok := s.engine.(relay.DeliveryLookup); ok {
		return lk.LookupDelivery(ctx, id, deliveryTTL, call.agentID, call.jobID)
	}
	first, err := s.engine.FirstDelivery(ctx, id, deliveryTTL)
	if err != nil || !first {
		return relay.DeliveryInfo{}, err
	}
	return s.readDelivery(ctx, call)
}
