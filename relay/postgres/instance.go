package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

// NoteInstance implements relay.Instances.
func (r *records) NoteInstance(ctx context.Context, instanceID string, state relay.InstanceState, at time.Time) error {
	if err := state.Check(); err != nil {
		return fail("note instance", err)
	}
	sql := `INSERT INTO chronos_instances (instance_id, started_ns) VALUES ($1, $2)
		ON CONFLICT (instance_id) DO UPDATE SET started_ns = EXCLUDED.started_ns`
	if state == relay.InstanceStopped {
		sql = `INSERT INTO chronos_instances (instance_id, stopped_ns) VALUES ($1, $2)
		ON CONFLICT (instance_id) DO UPDATE SET stopped_ns = EXCLUDED.stopped_ns`
	}
	if _, err := r.pool.Exec(ctx, sql, instanceID, nsOf(at)); err != nil {
		return fail("note instance", err)
	}
	return nil
}

// SetInstanceCallback implements relay.Instances. A callback already
// recorded writes nothing.
func (r *records) SetInstanceCallback(ctx context.Context, instanceID, callbackURL string) error {
	_, err := r.pool.Exec(ctx, `INSERT INTO chronos_instances AS i (instance_id, callback_url) VALUES ($1, $2)
		ON CONFLICT (instance_id) DO UPDATE SET callback_url = EXCLUDED.callback_url
		WHERE i.callback_url <> EXCLUDED.callback_url`, instanceID, callbackURL)
	if err != nil {
		return fail("set instance callback", err)
	}
	return nil
}

// Instance implements relay.Instances.
func (r *records) Instance(ctx context.Context, instanceID string) (relay.InstanceInfo, error) {
	info := relay.InstanceInfo{InstanceID: instanceID}
	var stoppedNs, startedNs int64
	err := r.pool.QueryRow(ctx, `SELECT stopped, stopped_ns, started_ns, callback_url
		FROM chronos_instances WHERE instance_id = $1`, instanceID).
		Scan(&info.Stopped, &stoppedNs, &startedNs, &info.CallbackURL)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return info, nil
	case err != nil:
		return relay.InstanceInfo{}, fail("instance", err)
	}
	info.StoppedAt = fromNs(stoppedNs)
	info.StartedAt = fromNs(startedNs)
	return info, nil
}
