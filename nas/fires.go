package nas

// The fire path both deliveries share (the relay route, relayroute.go, and
// NAS's own dispatchers, localdelivery.go): settle what must not reach the
// agent, mint the fire token (or have a direct fire signed under its cron
// key), call the agent, and say what its answer means as a Verdict, with the
// metrics, logs and last-fire record of each outcome.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/direct"
)

// Fires is the fire path: it settles what must not reach the agent, mints
// the fire token (or has a direct fire signed under its cron key), calls the
// agent and says what its answer means as a Verdict. The relay route hands
// it signed calls (Relay); NAS's own dispatchers hand it leases (see
// LocalDeliverer). It is safe for concurrent use.
type Fires struct {
	*core
	heal   *SelfHeal
	direct *directKeys
}

// fireCall is one delivery of a fire handed to NAS: which fire, and which
// attempt at it.
type fireCall struct {
	scheduleID, agentID, jobID string
	fireAt                     contract.Time
	attempt                    int
}

// lastFireOut says where the last-fire record of a relayed fire goes: a nil
// *lastFireOut writes it at once (the relay route, whose caller is another
// process); otherwise it is kept in Record for the caller to write with the
// fire's ack (an in-process dispatcher: one store write per fire, not two).
type lastFireOut struct {
	Record *relay.LastFire
}

// readDelivery reads, for the first delivery of call, the fire's armed row
// and whether its instance is stopped, from the store: both delivery paths
// decide on what it returns. A row that is gone is not Found; a row re-armed
// since (another schedule id) is Found but not read further, since it is
// dropped whatever its instance.
func (s *Fires) readDelivery(ctx context.Context, call *fireCall) (relay.DeliveryInfo, error) {
	info := relay.DeliveryInfo{First: true}
	row, err := s.engine.Get(ctx, call.agentID, call.jobID)
	switch {
	case errors.Is(err, relay.ErrNotFound):
		return info, nil
	case err != nil:
		return relay.DeliveryInfo{}, err
	}
	info.Found, info.Row = true, row
	if row.ScheduleID != call.scheduleID {
		return info, nil // re-armed: dropped whatever the instance
	}
	info.Stopped, err = s.engine.InstanceStopped(ctx, row.InstanceID)
	return info, err
}

// settleWithoutAgent settles the deliveries that do not reach the agent: a
// duplicate delivery, a fire whose job is gone or re-armed, and one of a
// stopped instance. It reports false when the fire is to be delivered.
func (s *Fires) settleWithoutAgent(ctx context.Context, call *fireCall, info relay.DeliveryInfo, out *lastFireOut) (Verdict, bool) {
	if !info.First {
		s.countFire(ctx, deliveryDuplicate, 0)
		s.logFire(ctx, call, slog.LevelDebug, "relay duplicate")
		return Verdict{Kind: VerdictDuplicate}, true
	}
	row := info.Row
	if !info.Found || row.ScheduleID != call.scheduleID {
		s.countFire(ctx, deliveryDropped, 0)
		reason := "job is no longer armed"
		if info.Found {
			reason = "job was re-armed"
		}
		s.logFire(ctx, call, slog.LevelDebug, "fire dropped", "reason", reason)
		return Verdict{Kind: VerdictDropped, Reason: reason}, true
	}
	if info.Stopped {
		s.countFire(ctx, deliveryInstanceStopped, 0)
		s.logFire(ctx, call, slog.LevelDebug, "fire dropped: instance stopped", "instance_id", row.InstanceID)
		s.noteLastFire(ctx, out, row, relay.LastFireInstanceStopped, "the operator stopped instance "+row.InstanceID)
		return Verdict{Kind: VerdictInstanceStopped}, true
	}
	return Verdict{}, false
}

// deliver mints the fire token for row's fire and calls the agent. An error
// (the token could not be minted) means the agent was not called.
func (s *Fires) deliver(ctx context.Context, call *fireCall, row relay.OneShot, now time.Time, out *lastFireOut) (Verdict, error) {
	// fire_at in the agent's own spelling, in the body and the token alike.
	fire := contract.FireRequest{JobID: row.JobID, FireAt: fireAt(row), ScheduleID: row.ScheduleID, Attempt: call.attempt}
	fireBody := agentcall.FireBody(&fire)
	token, err := s.minter.Mint(now, FireToken{InstanceID: row.InstanceID, Fire: fire, Body: fireBody})
	if err != nil {
		return Verdict{}, fmt.Errorf("relay: %w", err)
	}
	// A refused token is retried for a bounded number of attempts; the
	// attempt number comes from the relay, so the bound holds whichever
	// engine and dispatcher process delivers the fire.
	res := s.caller.Fire(ctx, FireURL(row.CallbackURL), token, fireBody).AtAttempt(call.attempt, s.cfg.Relay.Retry.MaxAuthAttempts)
	return s.verdictOf(ctx, call, row, res, out), nil
}

// deliverDirect signs row's fire under the job's cron key with dd and calls
// the agent; the agent's answer becomes NAS's verdict as a mediated fire's
// does (verdictOf: the same metrics, logs, last-fire record). A fire that
// could not be signed is counted and logged as a retry
// (direct.ErrNoEncryptionKey) or a rejection (direct.ErrKeyDoesNotOpen) and
// that error returned; its reason names no key.
func (s *Fires) deliverDirect(ctx context.Context, dd *direct.Deliverer, call *fireCall, row relay.OneShot, out *lastFireOut) (Verdict, error) {
	res, err := dd.Fire(ctx, row, call.attempt)
	switch {
	case err == nil:
		return s.verdictOf(ctx, call, row, res, out), nil
	case errors.Is(err, direct.ErrKeyDoesNotOpen):
		s.countFire(ctx, deliveryRejected, 0)
		s.logFire(ctx, call, slog.LevelWarn, "fire rejected", "reason", err.Error())
	default:
		s.countFire(ctx, deliveryRetry, 0)
		s.logFire(ctx, call, slog.LevelWarn, "fire not taken; relay retries", "reason", err.Error())
	}
	return Verdict{}, err
}

// verdictOf turns the agent's answer to a fire into NAS's verdict: final
// (delivered or rejected) or a retry, counted, logged and, for a delivered
// fire, recorded as the job's last fire as out says.
func (s *Fires) verdictOf(ctx context.Context, call *fireCall, row relay.OneShot, res agentcall.FireResult, out *lastFireOut) Verdict {
	switch res.Outcome {
	case agentcall.OutcomeDelivered:
		lag := s.now().Sub(row.FireAt)
		s.metrics.fireLag.Observe(max(lag.Seconds(), 0))
		s.countFire(ctx, deliveryDelivered, lag)
		if s.log.Enabled(ctx, slog.LevelDebug) { // no boxed attributes for a record not written
			s.logFire(ctx, call, slog.LevelDebug, "fire delivered", "agent_status", res.AgentStatus, "run_id", res.RunID, "lag_ms", lag.Milliseconds())
		}
		v := Verdict{Kind: VerdictDelivered}
		switch res.AgentStatus {
		case contract.FireAccepted, contract.FireDuplicate, contract.FireGone, contract.FireRefreshed:
			v.AgentStatus = res.AgentStatus
		}
		if res.AgentStatus != contract.FireGone {
			// The agent re-arms the job itself; until it does, the job is
			// unarmed after this fire. (An agent that has no such job
			// wants it unarmed.)
			s.noteLastFire(ctx, out, row, relay.LastFireDelivered, deliveredReason(res))
		}
		return v
	case agentcall.OutcomeRejected:
		s.countFire(ctx, deliveryRejected, 0)
		s.logFire(ctx, call, slog.LevelWarn, "fire rejected", "reason", res.Reason, "status", res.HTTPStatus)
		return Verdict{Kind: VerdictRejected, Reason: res.Reason}
	default:
		s.countFire(ctx, deliveryRetry, 0)
		s.logFire(ctx, call, slog.LevelWarn, "fire not taken; relay retries", "reason", res.Reason, "status", res.HTTPStatus, "cold_start", res.ColdStart)
		return Verdict{Kind: VerdictRetry, Reason: res.Reason, RetryAfter: res.RetryAfter, AgentDown: res.AgentDown()}
	}
}

// noteLastFire records the final outcome of row's fire as out says.
func (s *Fires) noteLastFire(ctx context.Context, out *lastFireOut, row relay.OneShot, outcome, reason string) {
	if out == nil {
		s.heal.recordLastFire(ctx, row, outcome, reason)
		return
	}
	out.Record = &relay.LastFire{
		AgentID: row.AgentID, InstanceID: row.InstanceID, JobID: row.JobID, ScheduleID: row.ScheduleID,
		FireAt: row.FireAt, CallbackURL: row.CallbackURL, Outcome: outcome, Reason: reason, At: s.now(),
	}
}

// logFire logs one record about call's fire. The fire's attributes are
// built only for records that are written: a logger.With per fire costs a
// handler clone even when the level is off.
func (s *Fires) logFire(ctx context.Context, call *fireCall, level slog.Level, msg string, args ...any) {
	if !s.log.Enabled(ctx, level) {
		return
	}
	s.log.Log(ctx, level, msg, append([]any{"agent_id", call.agentID, "job_id", call.jobID, "schedule_id", call.scheduleID,
		"fire_at", call.fireAt.String(), "attempt", call.attempt}, args...)...)
}

// countFire counts one relayed fire by outcome in the metrics and the
// summary (lag is the delivered fire's lag after fire_at, else 0).
func (s *Fires) countFire(ctx context.Context, outcome string, lag time.Duration) {
	s.metrics.countDelivery(outcome)
	s.noteSummary(ctx, outcome, lag)
}

// deliveredReason is the last-fire reason of a delivered fire: "agent
// answered", the agent's HTTP status and, when it sent one, its status
// word (as "agent answered 202 accepted"), built in one allocation.
func deliveredReason(res agentcall.FireResult) string {
	var buf [64]byte
	b := append(buf[:0], "agent answered "...)
	b = strconv.AppendInt(b, int64(res.HTTPStatus), 10)
	if res.AgentStatus != "" {
		b = append(b, ' ')
		b = append(b, res.AgentStatus...)
	}
	return string(b)
}

// appendFireRequest appends f as json.Marshal writes it, byte for byte (the
// body the token's `bh` binds; see agentcall.AppendFireBody).
func appendFireRequest(b []byte, f *contract.FireRequest) []byte {
	return agentcall.AppendFireBody(b, f)
}
