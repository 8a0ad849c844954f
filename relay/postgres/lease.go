package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

// reapBatch is how many expired leases one reap statement returns.
const reapBatch = 1000

// Extend implements relay.Queue: the lease runs leaseFor from now by the
// engine's clock.
func (q *queue) Extend(ctx context.Context, l relay.Lease, leaseFor time.Duration) (relay.Lease, error) {
	if leaseFor <= 0 {
		return relay.Lease{}, fmt.Errorf("postgres: extend: lease duration %s is not positive", leaseFor)
	}
	r, err := scanOneShot(q.pool.QueryRow(ctx, `UPDATE chronos_fires SET lease_until_ms = chronos_now_ms($1) + $2
		WHERE agent_id = $3 AND job_id = $4 AND token = $5 AND state = 2
		RETURNING `+oneShotCols, q.now(), durMillis(leaseFor), l.AgentID, l.JobID, l.Token))
	if errors.Is(err, pgx.ErrNoRows) {
		return relay.Lease{}, fmt.Errorf("postgres: extend %s: %w", l.ScheduleID, relay.ErrLeaseLost)
	}
	if err != nil {
		return relay.Lease{}, fail("extend", err)
	}
	return r.lease(), nil
}

// Reap implements relay.Queue: expired leases (by the engine's clock) go
// back to the queue, due now, a batch per statement (chronos_reap); every
// engine of the schema is woken when any went back, or when an agent with
// held fires may have room for them (the safety net of flow control).
func (q *queue) Reap(ctx context.Context) (int, error) {
	total, woke := 0, false
	for {
		var n int32
		var w bool
		err := q.pool.QueryRow(ctx, `SELECT * FROM chronos_reap($1, $2, $3)`,
			q.now(), wakeChannel(q.schema), reapBatch).Scan(&n, &w)
		if err != nil {
			if woke {
				q.wake.Notify()
			}
			return total, fail("reap", err)
		}
		total += int(n)
		woke = woke || w
		if n < reapBatch {
			break
		}
	}
	if woke {
		q.wake.Notify()
	}
	return total, nil
}
