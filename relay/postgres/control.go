package postgres

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

// SetInstanceState implements relay.Control: chronos_instances.stopped,
// which claims read by instance id. A state already in force writes nothing.
func (ct *control) SetInstanceState(ctx context.Context, instanceID string, state relay.InstanceState) error {
	if err := state.Check(); err != nil {
		return fail("set instance state", err)
	}
	_, err := ct.pool.Exec(ctx, `INSERT INTO chronos_instances AS i (instance_id, stopped) VALUES ($1, $2)
		ON CONFLICT (instance_id) DO UPDATE SET stopped = EXCLUDED.stopped WHERE i.stopped <> EXCLUDED.stopped`,
		instanceID, state == relay.InstanceStopped)
	if err != nil {
		return fail("set instance state", err)
	}
	return nil
}

// InstanceStopped implements relay.Control.
func (ct *control) InstanceStopped(ctx context.Context, instanceID string) (bool, error) {
	var stopped bool
	err := ct.pool.QueryRow(ctx, `SELECT stopped FROM chronos_instances WHERE instance_id = $1`, instanceID).Scan(&stopped)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fail("instance stopped", err)
	}
	return stopped, nil
}

// deliveryGCEvery is how many first-delivery records a process writes for
// each sweep of expired ones, and deliveryGCMax how many one sweep deletes:
// on average more expire than are written, so the table stays as small as
// the ttl allows.
const (
	deliveryGCEvery = 64
	deliveryGCMax   = 4 * deliveryGCEvery
)

// deliveryCalls counts first-delivery writes, to space the sweeps.
var deliveryCalls atomic.Uint64

// firstDeliverySQL is the first-delivery upsert: a record not yet expired by
// the engine's clock is kept (not first); one expired counts as new. It
// leaves a CTE "first" holding a row when the id is new. Every
// deliveryGCEvery-th call also deletes expired records of other ids
// (index chronos_deliveries_expiry).
//
// $1 delivery id, $2 ttl ms, $3 clock.
func firstDeliverySQL() string {
	gc := ""
	if deliveryCalls.Add(1)%deliveryGCEvery == 0 {
		gc = `gc AS (
			DELETE FROM chronos_deliveries WHERE delivery_id IN (
				SELECT delivery_id FROM chronos_deliveries
				WHERE expires_ms <= (SELECT ms FROM now) AND delivery_id <> $1
				ORDER BY expires_ms LIMIT ` + strconv.Itoa(deliveryGCMax) + ` FOR UPDATE SKIP LOCKED)
		),`
	}
	return `WITH now AS (SELECT chronos_now_ms($3) AS ms), ` + gc + `
		first AS (
			INSERT INTO chronos_deliveries AS d (delivery_id, expires_ms)
			SELECT $1, ms + $2::bigint FROM now
			ON CONFLICT (delivery_id) DO UPDATE SET expires_ms = EXCLUDED.expires_ms
			WHERE d.expires_ms <= EXCLUDED.expires_ms - $2::bigint
			RETURNING 1
		)`
}

// ttlMs is a first-delivery ttl in whole milliseconds, rounded up, at
// least 1.
func ttlMs(ttl time.Duration) int64 {
	if ttl <= 0 {
		return 1
	}
	return durMillis(ttl)
}

// FirstDelivery implements relay.Control: one upsert, the expiry judged by
// the engine's clock.
func (ct *control) FirstDelivery(ctx context.Context, deliveryID string, ttl time.Duration) (bool, error) {
	var n int
	err := ct.pool.QueryRow(ctx, firstDeliverySQL()+` SELECT count(*) FROM first`,
		deliveryID, ttlMs(ttl), ct.now()).Scan(&n)
	if err != nil {
		return false, fail("first delivery", err)
	}
	return n > 0, nil
}

// RaiseRekeyFloor implements relay.Control. The floor is kept in whole
// milliseconds, rounded up, as the other engines keep it.
func (ct *control) RaiseRekeyFloor(ctx context.Context, agentID string, at time.Time) (time.Time, error) {
	if agentID == "" {
		return time.Time{}, errors.New("postgres: raise rekey floor: empty agent id")
	}
	var ns int64
	err := ct.pool.QueryRow(ctx, `INSERT INTO chronos_rekey AS r (agent_id, floor_ns) VALUES ($1, $2)
		ON CONFLICT (agent_id) DO UPDATE SET floor_ns = greatest(r.floor_ns, EXCLUDED.floor_ns)
		RETURNING floor_ns`, agentID, ceilMillis(at)*int64(time.Millisecond)).Scan(&ns)
	if err != nil {
		return time.Time{}, fail("raise rekey floor", err)
	}
	return fromNs(ns), nil
}

// RekeyFloor implements relay.Control.
func (ct *control) RekeyFloor(ctx context.Context, agentID string) (time.Time, error) {
	var ns int64
	err := ct.pool.QueryRow(ctx, `SELECT floor_ns FROM chronos_rekey WHERE agent_id = $1`, agentID).Scan(&ns)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fail("rekey floor", err)
	}
	return fromNs(ns), nil
}
