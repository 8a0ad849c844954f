package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.Census = (*Engine)(nil)

// ArmedByAgent implements relay.Census: the armed rows grouped along their
// primary key (agent_id, job_id), so the scan stops after max+1 agents.
func (ct *control) ArmedByAgent(ctx context.Context, max int) ([]relay.AgentArmed, bool, error) {
	max = relay.CensusMax(max)
	rows, err := ct.pool.Query(ctx, `SELECT agent_id, count(*) FROM chronos_fires
		GROUP BY agent_id ORDER BY agent_id LIMIT $1`, max+1)
	if err != nil {
		return nil, false, fail("armed by agent", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relay.AgentArmed, error) {
		var a relay.AgentArmed
		err := r.Scan(&a.AgentID, &a.Armed)
		return a, err
	})
	if err != nil {
		return nil, false, fail("armed by agent", err)
	}
	if len(out) > max {
		return out[:max], true, nil
	}
	return out, false, nil
}

// StoppedInstances implements relay.Census (index chronos_instances_stopped).
func (ct *control) StoppedInstances(ctx context.Context, max int) ([]string, bool, error) {
	max = relay.CensusMax(max)
	rows, err := ct.pool.Query(ctx, `SELECT instance_id FROM chronos_instances WHERE stopped
		ORDER BY instance_id LIMIT $1`, max+1)
	if err != nil {
		return nil, false, fail("stopped instances", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false, fail("stopped instances", err)
	}
	if len(ids) > max {
		return ids[:max], true, nil
	}
	return ids, false, nil
}
