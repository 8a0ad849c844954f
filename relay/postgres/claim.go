package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// maxClaim bounds the leases of one claim (a claim may return fewer than
// asked).
const maxClaim = 10000

// Claim implements relay.Queue: one call of chronos_claim
// (schema/0001_queue.sql) leases, under flow control, the held fires of
// agents whose room grew, then due fires in due order, and returns them
// with everything a delivery needs (the row, the agent's failure count,
// whether its instance is stopped), in one round trip and one transaction.
// The claim never waits for a lock: fires and agents another transaction
// holds are left for the next claim.
func (q *queue) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	if max <= 0 {
		return nil, nil
	}
	if leaseFor <= 0 {
		return nil, fmt.Errorf("postgres: claim: lease duration %s is not positive", leaseFor)
	}
	if err := (relay.AgentPolicy{Parallelism: flow.Parallelism, Rate: flow.Rate}).Check(); err != nil {
		return nil, fmt.Errorf("postgres: claim: flow: %w", err)
	}
	rows, err := q.pool.Query(ctx, `SELECT * FROM chronos_claim($1, $2, $3, $4, $5)`,
		q.now(), min(max, maxClaim), durMillis(leaseFor), min(flow.Parallelism, math.MaxInt32), flow.Rate)
	if err != nil {
		return nil, fail("claim", err)
	}
	defer rows.Close()
	// ClaimedAt is by this process's clock, not the engine's (see
	// relay.Lease.ClaimedAt): deliverers judge its age with time.Since.
	claimed := time.Now()
	var out []relay.Lease
	for rows.Next() {
		var failures int32
		var stopped bool
		r, err := scanOneShot(rows, &failures, &stopped)
		if err != nil {
			return out, fail("claim", err)
		}
		l := r.lease()
		l.ClaimedAt = claimed
		l.AgentFailures = int(failures)
		l.InstanceStopped = stopped
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		// The leases read may have been committed: they are the caller's.
		return out, fail("claim", err)
	}
	return out, nil
}

// NextDue implements relay.Queue: the earliest due time of a queued fire,
// of the gate of an agent with held fires (a Down delivery's hold, its
// rate's next slot), or now for an agent with held fires and room for them
// (by the parallelism of the claim that held them: a lease of it ended),
// by the engine's clock. An agent at its parallelism counts for nothing,
// or a dispatcher would claim again and again: the end of one of its
// leases announces a wake-up.
func (q *queue) NextDue(ctx context.Context) (time.Duration, bool, error) {
	var now int64
	var due, gate *int64
	var ready bool
	err := q.pool.QueryRow(ctx, `SELECT n,
		(SELECT due_ms FROM chronos_fires WHERE state = 0 ORDER BY due_ms LIMIT 1),
		(SELECT min(greatest(gate_ms, ceil(tat_ms)::bigint)) FROM chronos_agents
			WHERE has_held AND NOT disabled AND greatest(gate_ms, ceil(tat_ms)::bigint) > n),
		EXISTS (SELECT 1 FROM chronos_agents a
			WHERE a.has_held AND NOT a.disabled AND a.gate_ms <= n AND a.tat_ms <= n
				AND (NOT a.probing AND a.ep <= 0
					OR (SELECT count(*) FROM chronos_fires f
						WHERE f.agent_id = a.agent_id AND f.state = 2 AND f.lease_until_ms > n)
						< CASE WHEN a.probing THEN 1 ELSE a.ep END))
		FROM chronos_now_ms($1) AS n`, q.now()).Scan(&now, &due, &gate, &ready)
	if err != nil {
		return 0, false, fail("next due", err)
	}
	if ready {
		return 0, true, nil
	}
	best, ok := int64(0), false
	for _, v := range []*int64{due, gate} {
		if v != nil && (!ok || *v < best) {
			best, ok = *v, true
		}
	}
	if !ok {
		return 0, false, nil
	}
	return max(time.Duration(best-now)*time.Millisecond, 0), true, nil
}
