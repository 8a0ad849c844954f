package nas

// The relay route: the signed endpoint a dispatcher delivers each fire to.
// It verifies the call, drops what must not reach the agent, mints the fire
// token and calls the agent, and answers the relay final or retry.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/agentcall"
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
// forged, stale or altered call is a 401 and changes nothing. The answer is
// a 200 RelayResponse (final for the relay) or a *contract.Error with
// RetryAfter (retry): 503 agent_unavailable when the agent is not answering
// (see agentDown: the relay then holds its fires and probes it), 502
// agent_unavailable when it answered another 5xx or refused the fire token.
// ClassifyAnswer says which the agent's answer is, and a refused fire token
// is retried until the call's attempt reaches relay.retry.max_auth_attempts.
func (s *Service) Relay(ctx context.Context, h RelayHeaders, body []byte) (contract.RelayResponse, error) {
	now := s.now()
	req, err := s.relayRequest(ctx, h, body, now)
	if err != nil {
		return contract.RelayResponse{}, err
	}
	if req.Attempt > 1 {
		s.metrics.retries.Inc()
	}
	// The key carries the attempt: an exact replay of a signed call repeats
	// both, while each new attempt is a new delivery.
	info, err := s.lookupDelivery(ctx, "relay:"+h.ID+":"+strconv.Itoa(req.Attempt), req)
	if err != nil {
		return contract.RelayResponse{}, fmt.Errorf("relay: %w", err)
	}
	if resp, settled := s.settleWithoutAgent(ctx, &req, info, nil); settled {
		return resp, nil
	}
	if info.Row.Direct.IsDirect() {
		return s.relayDirect(ctx, &req, info.Row)
	}
	return s.deliver(ctx, &req, info.Row, now, nil)
}

// relayDirect delivers on the relay route the fire of a job armed for
// direct delivery, as NAS's own dispatchers do: signed under the job's cron
// key, never NAS's (the agent refuses NAS's token for such a job). Relay
// processes deliver such fires themselves; one older than direct delivery
// posts them here.
func (s *Service) relayDirect(ctx context.Context, req *contract.RelayRequest, row relay.OneShot) (contract.RelayResponse, error) {
	dd, err := direct.New(direct.Config{
		Sealer: s.direct.sealer, Issuer: s.cfg.PublicURL, Caller: s.caller,
		MaxAuthAttempts: s.cfg.Relay.Retry.MaxAuthAttempts, Logger: s.log, Now: s.now,
	})
	if err != nil {
		return contract.RelayResponse{}, fmt.Errorf("relay: %w", err)
	}
	resp, err := s.deliverDirect(ctx, dd, req, row, nil)
	if errors.Is(err, direct.ErrKeyDoesNotOpen) {
		return contract.RelayResponse{Status: contract.RelayRejected, Reason: err.Error()}, nil
	}
	return resp, err
}

// deliverDirect signs row's fire under the job's cron key with dd and calls
// the agent; the agent's answer becomes NAS's answer as a mediated fire's
// does (relayAnswer: the same metrics, logs, last-fire record). A fire that
// could not be signed is counted and logged as a retry
// (direct.ErrNoEncryptionKey) or a rejection (direct.ErrKeyDoesNotOpen) and
// that error returned; its reason names no key.
func (s *Service) deliverDirect(ctx context.Context, dd *direct.Deliverer, req *contract.RelayRequest, row relay.OneShot, out *lastFireOut) (contract.RelayResponse, error) {
	res, err := dd.Fire(ctx, row, req.Attempt)
	switch {
	case err == nil:
		return s.relayAnswer(ctx, req, row, res, out)
	case errors.Is(err, direct.ErrKeyDoesNotOpen):
		s.countFire(ctx, deliveryRejected, 0)
		s.logFire(ctx, req, slog.LevelWarn, "fire rejected", "reason", err.Error())
	default:
		s.countFire(ctx, deliveryRetry, 0)
		s.logFire(ctx, req, slog.LevelWarn, "fire not taken; relay retries", "reason", err.Error())
	}
	return contract.RelayResponse{}, err
}

// lastFireOut says where the last-fire record of a relayed fire goes: a nil
// *lastFireOut writes it at once (the relay route, whose caller is another
// process); otherwise it is kept in Record for the caller to write with the
// fire's ack (an in-process dispatcher: one store write per fire, not two).
type lastFireOut struct {
	Record *relay.LastFire
}

// noteLastFire records the final outcome of row's fire as out says.
func (s *Service) noteLastFire(ctx context.Context, out *lastFireOut, row relay.OneShot, outcome, reason string) {
	if out == nil {
		s.recordLastFire(ctx, row, outcome, reason)
		return
	}
	out.Record = &relay.LastFire{
		AgentID: row.AgentID, InstanceID: row.InstanceID, JobID: row.JobID, ScheduleID: row.ScheduleID,
		FireAt: row.FireAt, CallbackURL: row.CallbackURL, Outcome: outcome, Reason: reason, At: s.now(),
	}
}

// relayRequest verifies a relay call's signature and decodes and checks its
// body.
func (s *Service) relayRequest(ctx context.Context, h RelayHeaders, body []byte, now time.Time) (contract.RelayRequest, error) {
	if err := contract.VerifyWebhook(contract.WebhookCall{ID: h.ID, Timestamp: h.Timestamp, Signature: h.Signature, Body: body}, contract.WebhookVerifyOptions{Keys: s.secrets, Now: now}); err != nil {
		s.log.WarnContext(ctx, "relay call refused", "reason", err.Error())
		return contract.RelayRequest{}, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidSignature, "relay signature does not verify")
	}
	req, e := decodeRelayRequest(body)
	if e != nil {
		return contract.RelayRequest{}, e
	}
	if req.ScheduleID == "" || req.AgentID == "" || req.FireAt.IsZero() || req.Attempt < 1 {
		return contract.RelayRequest{}, contract.BadRequest(contract.CodeInvalidRequest, "schedule_id, agent_id, job_id, fire_at and an attempt of at least 1 are required")
	}
	if e := checkJobID(req.JobID); e != nil {
		return contract.RelayRequest{}, e
	}
	return req, nil
}

// logFire logs one record about req's fire. The fire's attributes are built
// only for records that are written: a logger.With per fire costs a handler
// clone even when the level is off.
func (s *Service) logFire(ctx context.Context, req *contract.RelayRequest, level slog.Level, msg string, args ...any) {
	if !s.log.Enabled(ctx, level) {
		return
	}
	s.log.Log(ctx, level, msg, append([]any{"agent_id", req.AgentID, "job_id", req.JobID, "schedule_id", req.ScheduleID,
		"fire_at", req.FireAt.String(), "attempt", req.Attempt}, args...)...)
}

// settleWithoutAgent answers the calls that do not reach the agent: a
// duplicate delivery, a fire whose job is gone or re-armed, and one of a
// stopped instance. It reports false when the fire is to be delivered.
func (s *Service) settleWithoutAgent(ctx context.Context, req *contract.RelayRequest, info relay.DeliveryInfo, out *lastFireOut) (contract.RelayResponse, bool) {
	if !info.First {
		s.countFire(ctx, deliveryDuplicate, 0)
		s.logFire(ctx, req, slog.LevelDebug, "relay duplicate")
		return contract.RelayResponse{Status: contract.RelayDuplicate}, true
	}
	row := info.Row
	if !info.Found || row.ScheduleID != req.ScheduleID {
		s.countFire(ctx, deliveryDropped, 0)
		reason := "job is no longer armed"
		if info.Found {
			reason = "job was re-armed"
		}
		s.logFire(ctx, req, slog.LevelDebug, "fire dropped", "reason", reason)
		return contract.RelayResponse{Status: contract.RelayDropped, Reason: reason}, true
	}
	if info.Stopped {
		s.countFire(ctx, deliveryInstanceStopped, 0)
		s.logFire(ctx, req, slog.LevelDebug, "fire dropped: instance stopped", "instance_id", row.InstanceID)
		s.noteLastFire(ctx, out, row, relay.LastFireInstanceStopped, "the operator stopped instance "+row.InstanceID)
		return contract.RelayResponse{Status: contract.RelayInstanceStopped}, true
	}
	return contract.RelayResponse{}, false
}

// deliver mints the fire token for row's fire and calls the agent.
func (s *Service) deliver(ctx context.Context, req *contract.RelayRequest, row relay.OneShot, now time.Time, out *lastFireOut) (contract.RelayResponse, error) {
	// fire_at in the agent's own spelling, in the body and the token alike.
	fire := contract.FireRequest{JobID: row.JobID, FireAt: fireAt(row), ScheduleID: row.ScheduleID, Attempt: req.Attempt}
	fireBody := agentcall.FireBody(&fire)
	token, err := s.minter.Mint(now, FireToken{InstanceID: row.InstanceID, Fire: fire, Body: fireBody})
	if err != nil {
		return contract.RelayResponse{}, fmt.Errorf("relay: %w", err)
	}
	// A refused token is retried for a bounded number of attempts; the
	// attempt number comes from the relay, so the bound holds whichever
	// engine and dispatcher process delivers the fire.
	res := s.caller.Fire(ctx, FireURL(row.CallbackURL), token, fireBody).AtAttempt(req.Attempt, s.cfg.Relay.Retry.MaxAuthAttempts)
	return s.relayAnswer(ctx, req, row, res, out)
}

// appendFireRequest appends f as json.Marshal writes it, byte for byte (the
// body the token's `bh` binds; see agentcall.AppendFireBody).
func appendFireRequest(b []byte, f *contract.FireRequest) []byte {
	return agentcall.AppendFireBody(b, f)
}

// relayAnswer turns the agent's answer to a fire into the relay's: final
// (delivered or rejected) or a retry.
func (s *Service) relayAnswer(ctx context.Context, req *contract.RelayRequest, row relay.OneShot, res FireResult, out *lastFireOut) (contract.RelayResponse, error) {
	switch res.Outcome {
	case OutcomeDelivered:
		lag := s.now().Sub(row.FireAt)
		s.metrics.fireLag.Observe(max(lag.Seconds(), 0))
		s.countFire(ctx, deliveryDelivered, lag)
		if s.log.Enabled(ctx, slog.LevelDebug) { // no boxed attributes for a record not written
			s.logFire(ctx, req, slog.LevelDebug, "fire delivered", "agent_status", res.AgentStatus, "run_id", res.RunID, "lag_ms", lag.Milliseconds())
		}
		resp := contract.RelayResponse{Status: contract.RelayDelivered}
		switch res.AgentStatus {
		case contract.FireAccepted, contract.FireDuplicate, contract.FireGone, contract.FireRefreshed:
			resp.AgentStatus = res.AgentStatus
		}
		if res.AgentStatus != contract.FireGone {
			// The agent re-arms the job itself; until it does, the job is
			// unarmed after this fire. (An agent that has no such job
			// wants it unarmed.)
			s.noteLastFire(ctx, out, row, relay.LastFireDelivered, deliveredReason(res))
		}
		return resp, nil
	case OutcomeRejected:
		s.countFire(ctx, deliveryRejected, 0)
		s.logFire(ctx, req, slog.LevelWarn, "fire rejected", "reason", res.Reason, "status", res.HTTPStatus)
		return contract.RelayResponse{Status: contract.RelayRejected, Reason: res.Reason}, nil
	default:
		s.countFire(ctx, deliveryRetry, 0)
		s.logFire(ctx, req, slog.LevelWarn, "fire not taken; relay retries", "reason", res.Reason, "status", res.HTTPStatus, "cold_start", res.ColdStart)
		status := http.StatusBadGateway
		if agentDown(res) {
			status = http.StatusServiceUnavailable
		}
		e := contract.Errorf(status, contract.CodeAgentUnavailable, "%s", res.Reason)
		e.RetryAfter = res.RetryAfter
		return contract.RelayResponse{}, e
	}
}

// agentDown reports whether a retried fire found its agent not answering
// (see agentcall.FireResult.AgentDown): the relay route answers it 503
// agent_unavailable, and the relay holds the agent's fires and probes it.
func agentDown(res FireResult) bool { return res.AgentDown() }

// deliveredReason is the last-fire reason of a delivered fire: "agent
// answered", the agent's HTTP status and, when it sent one, its status
// word (as "agent answered 202 accepted"), built in one allocation.
func deliveredReason(res FireResult) string {
	var buf [64]byte
	b := append(buf[:0], "agent answered "...)
	b = strconv.AppendInt(b, int64(res.HTTPStatus), 10)
	if res.AgentStatus != "" {
		b = append(b, ' ')
		b = append(b, res.AgentStatus...)
	}
	return string(b)
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
func (s *Service) lookupDelivery(ctx context.Context, id string, req contract.RelayRequest) (relay.DeliveryInfo, error) {
	if lk, ok := s.engine.(relay.DeliveryLookup); ok {
		return lk.LookupDelivery(ctx, id, deliveryTTL, req.AgentID, req.JobID)
	}
	first, err := s.engine.FirstDelivery(ctx, id, deliveryTTL)
	if err != nil || !first {
		return relay.DeliveryInfo{}, err
	}
	return s.readDelivery(ctx, fireOf{agentID: req.AgentID, jobID: req.JobID, scheduleID: req.ScheduleID})
}

// fireOf names the fire a delivery is for.
type fireOf struct {
	agentID, jobID, scheduleID string
}

// readDelivery reads, for the first delivery of f, the fire's armed row and
// whether its instance is stopped, from the store: both delivery paths (the
// relay route and the in-process deliverer) decide on what it returns. A
// row that is gone is not Found; a row re-armed since (another schedule id)
// is Found but not read further, since it is dropped whatever its instance.
func (s *Service) readDelivery(ctx context.Context, f fireOf) (relay.DeliveryInfo, error) {
	info := relay.DeliveryInfo{First: true}
	row, err := s.engine.Get(ctx, f.agentID, f.jobID)
	switch {
	case errors.Is(err, relay.ErrNotFound):
		return info, nil
	case err != nil:
		return relay.DeliveryInfo{}, err
	}
	info.Found, info.Row = true, row
	if row.ScheduleID != f.scheduleID {
		return info, nil // re-armed: dropped whatever the instance
	}
	info.Stopped, err = s.engine.InstanceStopped(ctx, row.InstanceID)
	return info, err
}
