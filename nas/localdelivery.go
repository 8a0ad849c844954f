package nas

// In-process delivery: dispatchers that run inside NAS hand each fire to the
// Service directly, with no HTTP hop and no request signature. A fire armed
// for direct delivery is signed under the job's cron key (relay/direct)
// instead of NAS's signing key; everything else about it is the same. The checks of
// the relay route hold the same (a duplicate is not delivered again, a fire
// whose row is gone or re-armed is dropped, a stopped instance's fire is
// dropped), and NAS's answers map to the same outcomes (relay.AnswerOutcome,
// relay.ErrorOutcome).

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
// signature. It uses what the claim returned with each lease (the row and
// whether its instance is stopped), so a fire costs no store read of its own
// unless it waited more than a second after its claim, and it hands the
// fire's last-fire record to the dispatcher in the Outcome, to be written
// with the ack (relay.Outcome.Record). It is safe for concurrent use.
type LocalDeliverer struct {
	s      *Service
	seen   seenSet
	direct *direct.Deliverer
}

var _ relay.Deliverer = (*LocalDeliverer)(nil)

// LocalDeliverer returns a deliverer of this service's fires for
// dispatchers running in the same process. It opens direct fires' cron keys
// with the service's encryption key (relay.cron_key_encryption_key_file);
// without one they are retried with a reason that says so.
func (s *Service) LocalDeliverer() *LocalDeliverer {
	return (&LocalDeliverer{s: s}).WithCronKeys(s.direct.sealer)
}

// WithCronKeys sets the encryption key the jobs' cron keys are sealed under,
// with which d opens a direct fire's key to sign it, in place of the
// service's, and returns d. Call it before d delivers.
func (d *LocalDeliverer) WithCronKeys(sealer *cronkey.Sealer) *LocalDeliverer {
	s := d.s
	dd, err := direct.New(direct.Config{
		Sealer: sealer, Issuer: s.cfg.PublicURL, Caller: s.caller,
		MaxAuthAttempts: s.cfg.Relay.Retry.MaxAuthAttempts, Logger: s.log, Now: s.now,
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
	s := d.s
	now := s.now()
	req := contract.RelayRequest{ScheduleID: l.ScheduleID, AgentID: l.AgentID, JobID: l.JobID, FireAt: contract.NewTime(l.FireAt), Attempt: l.Attempt}
	if req.Attempt > 1 {
		s.metrics.retries.Inc()
	}
	info, err := d.lookup(ctx, l)
	if err != nil {
		return relay.Outcome{Kind: relay.Retry, Reason: fmt.Sprintf("relay: %v", err)}
	}
	var rec lastFireOut
	if resp, settled := s.settleWithoutAgent(ctx, &req, info, &rec); settled {
		return withRecord(relay.AnswerOutcome(resp), rec)
	}
	if info.Row.Direct.IsDirect() {
		return d.deliverDirect(ctx, &req, info.Row, &rec)
	}
	resp, err := s.deliver(ctx, &req, info.Row, now, &rec)
	return outcomeOf(resp, err, rec)
}

// outcomeOf maps NAS's answer to a fire, as the relay route would send it,
// to the dispatcher's outcome.
func outcomeOf(resp contract.RelayResponse, err error, rec lastFireOut) relay.Outcome {
	if err != nil {
		var e *contract.Error
		if errors.As(err, &e) {
			return relay.ErrorOutcome(e)
		}
		return relay.Outcome{Kind: relay.Retry, Reason: err.Error()}
	}
	return withRecord(relay.AnswerOutcome(resp), rec)
}

// deliverDirect delivers a direct fire for NAS's own dispatchers (see
// Service.deliverDirect); a fire that could not be signed gets
// direct.Deliverer.ErrorOutcome's verdict (retried without the encryption
// key, dead-lettered for a key that does not open).
func (d *LocalDeliverer) deliverDirect(ctx context.Context, req *contract.RelayRequest, row relay.OneShot, rec *lastFireOut) relay.Outcome {
	resp, err := d.s.deliverDirect(ctx, d.direct, req, row, rec)
	if errors.Is(err, direct.ErrNoEncryptionKey) || errors.Is(err, direct.ErrKeyDoesNotOpen) {
		return d.direct.ErrorOutcome(err)
	}
	return outcomeOf(resp, err, *rec)
}

// withRecord hands the fire's last-fire record, if any, to the dispatcher,
// which writes it with the ack of a Done outcome.
func withRecord(out relay.Outcome, rec lastFireOut) relay.Outcome {
	if out.Kind == relay.Done {
		out.Record = rec.Record
	}
	return out
}

// lookup is the relay route's lookupDelivery for a lease: the delivery id
// is remembered in process (no other process can hold the same lease), and
// the row and stopped flag come from the claim while it is fresh, else from
// the store.
func (d *LocalDeliverer) lookup(ctx context.Context, l relay.Lease) (relay.DeliveryInfo, error) {
	if !d.seen.first(deliveryKey{l.ScheduleID, l.Token, l.Attempt}) {
		return relay.DeliveryInfo{}, nil
	}
	if !l.ClaimedAt.IsZero() && time.Since(l.ClaimedAt) < claimFresh {
		return relay.DeliveryInfo{First: true, Found: true, Row: l.OneShot, Stopped: l.InstanceStopped}, nil
	}
	return d.s.readDelivery(ctx, fireOf{agentID: l.AgentID, jobID: l.JobID, scheduleID: l.ScheduleID})
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
