package nas

// In-process delivery: dispatchers that run inside NAS hand each fire to the
// Service directly, with no HTTP hop and no request signature. A fire armed
// for direct delivery is signed under the job's cron key (relay/direct)
// instead of NAS's signing key; everything else about it is the same. The checks of
// the relay route hold the same (a duplicate is not delivered again, a fire
// whose row is gone or re-armed is dropped, a stopped instance's fire is
// dropped), and NAS's verdicts end a fire as they do on the relay route
// (outcomeOf).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
	"github.com/chronoscron/chronos/relay/direct"
)

// claimFresh is how long after its claim a lease's row and stopped flag
// stand for the armed row: the claim read them atomically as it took the
// lease, so re-reading them at once would only repeat that read. A fire that
// waited longer (behind its agent's other fires, or under an extended
// lease) is checked against the store again. As on the relay route, where a
// change during the agent call cannot stop it either, a fire cancelled or
// re-armed within this moment before its call may still reach the agent,
// whose own check of the schedule id then discards it.
const claimFresh = time.Second

// seenCap bounds each generation of the delivery ids a LocalDeliverer
// remembers.
const seenCap = 8192

// LocalDeliverer is a relay.Deliverer for dispatchers in NAS's own process:
// it does what the relay route does with a call, minus the HTTP hop and the
// signature, and turns NAS's Verdict straight into the relay's Outcome. It
// uses what the claim returned with each lease (the row and whether its
// instance is stopped), so a fire costs no store read of its own unless it
// waited more than a second after its claim, and it hands the fire's
// last-fire record to the dispatcher in the Outcome, to be written with the
// ack (relay.Outcome.Record). It is safe for concurrent use.
type LocalDeliverer struct {
	f      *Fires
	seen   seenSet
	direct *direct.Deliverer
}

var _ relay.Deliverer = (*LocalDeliverer)(nil)

// LocalDeliverer returns a deliverer of this service's fires for
// dispatchers running in the same process. It opens direct fires' cron keys
// with the service's encryption key (relay.cron_key_encryption_key_file);
// without one they are retried with a reason that says so.
func (s *Service) LocalDeliverer() *LocalDeliverer {
	return (&LocalDeliverer{f: s.fires}).WithCronKeys(s.direct.sealer)
}

// WithCronKeys sets the encryption key the jobs' cron keys are sealed under,
// with which d opens a direct fire's key to sign it, in place of the
// service's, and returns d. Call it before d delivers.
func (d *LocalDeliverer) WithCronKeys(sealer *cronkey.Sealer) *LocalDeliverer {
	f := d.f
	dd, err := direct.New(direct.Config{
		Sealer: sealer, Issuer: f.cfg.PublicURL, Caller: f.caller,
		MaxAuthAttempts: f.cfg.Relay.Retry.MaxAuthAttempts, Logger: f.log, Now: f.now,
	})
	if err != nil {
		// public_url and the caller are checked by New: unreachable.
		panic(fmt.Sprintf("nas: direct deliverer: %v", err))
	}
	d.direct = dd
	return d
}

// Deliver implements relay.Deliverer.
func (d *LocalDeliverer) Deliver(ctx context.Context, l relay.Lease) relay.Outcome {
	f := d.f
	now := f.now()
	call := fireCall{scheduleID: l.ScheduleID, agentID: l.AgentID, jobID: l.JobID, fireAt: contract.NewTime(l.FireAt), attempt: l.Attempt}
	if call.attempt > 1 {
		f.metrics.retries.Inc()
	}
	info, err := d.lookup(ctx, l, &call, now)
	if err != nil {
		return relay.Outcome{Kind: relay.Retry, Reason: fmt.Sprintf("relay: %v", err)}
	}
	var rec lastFireOut
	if v, settled := f.settleWithoutAgent(ctx, &call, info, &rec); settled {
		return outcomeOf(v, rec)
	}
	var v Verdict
	if info.Row.Direct.IsDirect() {
		v, err = f.deliverDirect(ctx, d.direct, &call, info.Row, &rec)
		if errors.Is(err, direct.ErrNoEncryptionKey) || errors.Is(err, direct.ErrKeyDoesNotOpen) {
			// Retried without the encryption key, dead-lettered for a key
			// that does not open.
			return d.direct.ErrorOutcome(err)
		}
	} else {
		v, err = f.deliver(ctx, &call, info.Row, now, &rec)
	}
	if err != nil {
		// The agent was not called (the token could not be made): retried.
		return relay.Outcome{Kind: relay.Retry, Reason: err.Error()}
	}
	return outcomeOf(v, rec)
}

// outcomeOf maps NAS's verdict on a fire to the dispatcher's outcome: a
// final verdict is Done (Dead for a rejection) with the fire's last-fire
// record, if any, for the dispatcher to write with the ack; anything else is
// a Retry, a cold-start one of an agent that is down when the agent is not
// answering. The reasons read as the relay's HTTPDeliverer words NAS's
// answers on the relay route, so a fire's last error and dead letter say
// the same whichever path delivered it.
func outcomeOf(v Verdict, rec lastFireOut) relay.Outcome {
	switch v.Kind {
	case VerdictDelivered:
		return relay.Outcome{Kind: relay.Done, Reason: deliveredOutcome(v.AgentStatus), Record: rec.Record}
	case VerdictDropped:
		return relay.Outcome{Kind: relay.Done, Reason: withReason(contract.RelayDropped, v.Reason), Record: rec.Record}
	case VerdictInstanceStopped:
		return relay.Outcome{Kind: relay.Done, Reason: contract.RelayInstanceStopped, Record: rec.Record}
	case VerdictDuplicate:
		return relay.Outcome{Kind: relay.Done, Reason: contract.RelayDuplicate, Record: rec.Record}
	case VerdictRejected:
		return relay.Outcome{Kind: relay.Dead, Reason: withReason("rejected by the agent", v.Reason)}
	}
	wait := min(max(v.RetryAfter, 0), relay.MaxRetryAfter)
	if v.AgentDown {
		return relay.Outcome{Kind: relay.Retry, RetryAfter: wait, Reason: withReason(agentDownReason, v.Reason), ColdStart: true, AgentDown: true}
	}
	return relay.Outcome{Kind: relay.Retry, RetryAfter: wait, Reason: withReason(agentRetryReason, v.Reason)}
}

// The reasons of a retried fire: the status and code the relay route
// answers it with (503 when the agent is not answering, else 502), then
// the agent's reason.
const (
	agentDownReason  = "nas answered 503: " + contract.CodeAgentUnavailable
	agentRetryReason = "nas answered 502: " + contract.CodeAgentUnavailable
)

// deliveredOutcome is the outcome reason of a delivered fire: "delivered",
// then the agent's status word when NAS reports it back; a constant, so a
// fire costs no allocation for it.
func deliveredOutcome(agentStatus string) string {
	switch agentStatus {
	case contract.FireAccepted:
		return contract.RelayDelivered + ": " + contract.FireAccepted
	case contract.FireDuplicate:
		return contract.RelayDelivered + ": " + contract.FireDuplicate
	case contract.FireGone:
		return contract.RelayDelivered + ": " + contract.FireGone
	case contract.FireRefreshed:
		return contract.RelayDelivered + ": " + contract.FireRefreshed
	}
	return contract.RelayDelivered
}

// withReason is what, then ": " and reason when there is one.
func withReason(what, reason string) string {
	if reason == "" {
		return what
	}
	return what + ": " + reason
}

// lookup is the relay route's lookupDelivery for a lease: the delivery id
// is remembered in process (no other process can hold the same lease), and
// the row and stopped flag come from the claim while it is fresh (by the
// service's clock, now), else from the store.
func (d *LocalDeliverer) lookup(ctx context.Context, l relay.Lease, call *fireCall, now time.Time) (relay.DeliveryInfo, error) {
	if !d.seen.first(deliveryKey{l.ScheduleID, l.Token, l.Attempt}) {
		return relay.DeliveryInfo{}, nil
	}
	if !l.ClaimedAt.IsZero() && now.Sub(l.ClaimedAt) < claimFresh {
		return relay.DeliveryInfo{First: true, Found: true, Row: l.OneShot, Stopped: l.InstanceStopped}, nil
	}
	return d.f.readDelivery(ctx, call)
}

// deliveryKey identifies one delivery of a lease.
type deliveryKey struct {
	scheduleID string
	token      int64
	attempt    int
}

// seenSet remembers the delivery ids handed to a LocalDeliverer: the
// current generation and the one before, each at most seenCap long, so a
// repeat is recognised among the last seenCap to 2×seenCap deliveries at a
// constant cost. (A dispatcher never repeats a lease; this is the relay
// route's de-duplication, kept on this path too.)
type seenSet struct {
	mu        sync.Mutex
	cur, prev map[deliveryKey]struct{}
}

// first records k and reports whether it was not seen before.
func (m *seenSet) first(k deliveryKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.cur[k]; ok {
		return false
	}
	if _, ok := m.prev[k]; ok {
		return false
	}
	if m.cur == nil || len(m.cur) >= seenCap {
		// The older generation's map is emptied and reused: a fresh map
		// of seenCap entries per generation is garbage for the collector.
		m.prev, m.cur = m.cur, m.prev
		if m.cur == nil {
			m.cur = make(map[deliveryKey]struct{}, seenCap)
		}
		clear(m.cur)
	}
	m.cur[k] = struct{}{}
	return true
}
