package postgres

import (
	"context"
	"time"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.DeliveryLookup = (*Engine)(nil)

// lookupDeliverySelect follows firstDeliverySQL: when the delivery id is
// new, it reads the armed row of (agent, job) by its primary key and its
// instance's stopped flag by the instance's: one statement, one round trip.
// No row: not the first delivery.
//
// $1 delivery id, $2 ttl ms, $3 clock, $4 agent id, $5 job id.
const lookupDeliverySelect = `
	SELECT f.schedule_id IS NOT NULL,
		coalesce(f.schedule_id, ''), coalesce(f.instance_id, ''), coalesce(f.fire_at_ns, 0),
		coalesce(f.fire_at_spelling, ''), coalesce(f.callback_url, ''), coalesce(f.flex_ms, 0),
		coalesce(f.attempt, 0), coalesce(f.state, 0), coalesce(f.due_ms, 0), coalesce(f.created_ms, 0),
		coalesce(f.last_error, ''), coalesce(f.direct_sealed, ''), coalesce(f.direct_kid, ''),
		coalesce(f.direct_minted_ns, 0), coalesce(i.stopped, false)
	FROM first
	LEFT JOIN chronos_fires f ON f.agent_id = $4 AND f.job_id = $5
	LEFT JOIN chronos_instances i ON i.instance_id = f.instance_id`

// LookupDelivery implements relay.DeliveryLookup in one statement.
func (ct *control) LookupDelivery(ctx context.Context, deliveryID string, ttl time.Duration, agentID, jobID string) (relay.DeliveryInfo, error) {
	var (
		info                                         relay.DeliveryInfo
		fireAtNs, flexMs, dueMs, createdMs, mintedNs int64
		attempt                                      int32
		state                                        int16
		spelling, cb, lastErr, sealed, kid           string
	)
	o := &info.Row
	rows, err := ct.pool.Query(ctx, firstDeliverySQL()+lookupDeliverySelect,
		deliveryID, ttlMs(ttl), ct.now(), agentID, jobID)
	if err != nil {
		return relay.DeliveryInfo{}, fail("lookup delivery", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return relay.DeliveryInfo{}, fail("lookup delivery", err)
		}
		return relay.DeliveryInfo{}, nil // seen before
	}
	if err := rows.Scan(&info.Found, &o.ScheduleID, &o.InstanceID, &fireAtNs, &spelling, &cb, &flexMs,
		&attempt, &state, &dueMs, &createdMs, &lastErr, &sealed, &kid, &mintedNs, &info.Stopped); err != nil {
		return relay.DeliveryInfo{}, fail("lookup delivery", err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return relay.DeliveryInfo{}, fail("lookup delivery", err)
	}
	info.First = true
	if !info.Found {
		return relay.DeliveryInfo{First: true}, nil
	}
	o.AgentID, o.JobID = agentID, jobID
	o.FireAt = fromNs(fireAtNs)
	o.FireAtSpelling = spelling
	o.CallbackURL = cb
	o.Flex = time.Duration(flexMs) * time.Millisecond
	o.Attempt = int(attempt)
	o.State = relay.StateArmed
	if state == stateLeased {
		o.State = relay.StateLeased
	}
	// As Get reads it: a due time that is fire_at's, rounded up to its
	// millisecond, is fire_at itself.
	o.DueAt = fromMs(dueMs)
	if ceilMillis(o.FireAt) == dueMs {
		o.DueAt = o.FireAt
	}
	o.CreatedAt = fromMs(createdMs)
	o.LastError = lastErr
	if sealed != "" {
		o.Direct = relay.DirectKey{Sealed: sealed, KeyID: kid, MintedAt: fromNs(mintedNs)}
	}
	return info, nil
}
