package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

// Flow control (see relay.Flow) lives in chronos_agents, one row per agent
// (made by its first arm): its policy (parallelism, rate, disabled), its
// Down hold (gate_ms), its rate's next slot (tat_ms, GCRA without burst),
// its probe (probing, failures), the parallelism the claim that held its
// fires applied (ep, which NextDue judges their room by), its spreading phase (phase_n) and whether
// it may hold fires (has_held, set by the claim that holds one, cleared by
// a claim that finds none left). Held fires are rows of chronos_fires in
// state 1: still armed, out of the queue, leased by claims straight from
// there, oldest first, once their agent has room (see chronos_claim).
// Leases in flight are counted from the rows (chronos_fires_inflight), so
// there is no counter to keep in step. A transition that ends a lease of an
// agent with held fires, or SetAgentPolicy of one, announces a wake-up, so
// that a dispatcher claims them.

var _ relay.Flows = (*Engine)(nil)

// SetAgentPolicy implements relay.Flows: one upsert of the agent's row; when
// the agent holds fires a wake-up is announced, so that a claim judges them
// by the new policy at once.
func (f *flows) SetAgentPolicy(ctx context.Context, agentID string, p relay.AgentPolicy) error {
	if agentID == "" {
		return fmt.Errorf("postgres: set agent policy: empty agent id: %w", relay.ErrInvalidPolicy)
	}
	if err := p.Check(); err != nil {
		return fmt.Errorf("postgres: set agent policy of %s: %w: %w", agentID, relay.ErrInvalidPolicy, err)
	}
	if p.Parallelism > math.MaxInt32 {
		return fmt.Errorf("postgres: set agent policy of %s: %w: parallelism %d is too large", agentID, relay.ErrInvalidPolicy, p.Parallelism)
	}
	var woke bool
	// ep, the parallelism held fires get room against until the next claim
	// judges them, becomes the agent's own (none: the claim's default).
	err := f.pool.QueryRow(ctx, `INSERT INTO chronos_agents AS a (agent_id, has_policy, parallelism, rate, disabled, ep)
		VALUES ($1, $2, $3, $4, $5, $3)
		ON CONFLICT (agent_id) DO UPDATE SET has_policy = EXCLUDED.has_policy,
			parallelism = EXCLUDED.parallelism, rate = EXCLUDED.rate, disabled = EXCLUDED.disabled,
			ep = EXCLUDED.ep
		RETURNING CASE WHEN a.has_held AND NOT a.disabled THEN chronos_wake($6) ELSE false END`,
		agentID, p != (relay.AgentPolicy{}), p.Parallelism, p.Rate, p.Disabled, wakeChannel(f.schema)).Scan(&woke)
	if err != nil {
		return fail("set agent policy", err)
	}
	if woke {
		f.wake.Notify()
	}
	return nil
}

// agentFlowSQL reads the flow state of the agents a WHERE clause selects,
// and the engine's clock; $1 is the clock override.
const agentFlowSQL = `SELECT a.agent_id, a.parallelism, a.rate, a.disabled, a.probing, a.failures,
		greatest(a.gate_ms, ceil(a.tat_ms)::bigint),
		(SELECT count(*) FROM chronos_fires f WHERE f.agent_id = a.agent_id AND f.state = 2 AND f.lease_until_ms > n),
		(SELECT count(*) FROM chronos_fires f WHERE f.agent_id = a.agent_id AND f.state = 1), n
	FROM chronos_agents a, chronos_now_ms($1) AS n `

// scanAgentFlow reads one row of agentFlowSQL.
func scanAgentFlow(row pgx.Row) (relay.AgentFlow, error) {
	var (
		fl                relay.AgentFlow
		par, failures     int32
		gate, now         int64
		inFlight, held    int64
		rate              float64
		disabled, probing bool
	)
	if err := row.Scan(&fl.AgentID, &par, &rate, &disabled, &probing, &failures, &gate, &inFlight, &held, &now); err != nil {
		return relay.AgentFlow{}, err
	}
	fl.Policy = relay.AgentPolicy{Parallelism: int(par), Rate: rate, Disabled: disabled}
	fl.InFlight = int(inFlight)
	fl.Held = int(held)
	fl.Probing = probing
	fl.Failures = int(failures)
	if gate > now {
		fl.GateUntil = fromMs(gate)
	}
	return fl, nil
}

// AgentFlow implements relay.Flows.
func (f *flows) AgentFlow(ctx context.Context, agentID string) (relay.AgentFlow, error) {
	fl, err := scanAgentFlow(f.pool.QueryRow(ctx, agentFlowSQL+`WHERE a.agent_id = $2`, f.now(), agentID))
	if errors.Is(err, pgx.ErrNoRows) {
		return relay.AgentFlow{AgentID: agentID}, nil
	}
	if err != nil {
		return relay.AgentFlow{}, fail("agent flow", err)
	}
	return fl, nil
}

// AgentFlows implements relay.Flows: agents with a policy of their own, a
// held fire or a probe, in agent id order (byte order).
func (f *flows) AgentFlows(ctx context.Context) ([]relay.AgentFlow, error) {
	rows, err := f.pool.Query(ctx, agentFlowSQL+`WHERE a.has_policy OR a.probing
		OR (a.has_held AND EXISTS (SELECT 1 FROM chronos_fires h WHERE h.agent_id = a.agent_id AND h.state = 1))
		ORDER BY a.agent_id`, f.now())
	if err != nil {
		return nil, fail("agent flows", err)
	}
	defer rows.Close()
	var out []relay.AgentFlow
	for rows.Next() {
		fl, err := scanAgentFlow(rows)
		if err != nil {
			return nil, fail("agent flows", err)
		}
		out = append(out, fl)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("agent flows", err)
	}
	return out, nil
}

// AgentPhase implements relay.Flows: the agent's phase index comes from
// chronos_phase_seq on first use (chronos_agent_phase) and stays.
func (f *flows) AgentPhase(ctx context.Context, agentID string) (float64, error) {
	var n int64
	if err := f.pool.QueryRow(ctx, `SELECT chronos_agent_phase($1)`, agentID).Scan(&n); err != nil {
		return 0, fail("agent phase", err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("postgres: agent phase of %s: index %d", agentID, n)
	}
	return relay.VanDerCorput(uint64(n)), nil
}
