package postgres

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

// defaultUnarmedMax bounds an Unarmed answer when the query sets no Max.
const defaultUnarmedMax = 1000

// RecordLastFire implements relay.LastFires: one upsert, which makes the
// record new again (not reported).
func (r *records) RecordLastFire(ctx context.Context, f relay.LastFire) error {
	if f.AgentID == "" || f.JobID == "" || f.ScheduleID == "" || f.Outcome == "" {
		return errors.New("postgres: record last fire: agent id, job id, schedule id and outcome are required")
	}
	_, err := r.pool.Exec(ctx, `INSERT INTO chronos_last_fires
		(agent_id, job_id, instance_id, schedule_id, fire_at_ns, callback_url, outcome, reason, at_ns, reported)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, false)
		ON CONFLICT (agent_id, job_id) DO UPDATE SET instance_id = EXCLUDED.instance_id,
			schedule_id = EXCLUDED.schedule_id, fire_at_ns = EXCLUDED.fire_at_ns,
			callback_url = EXCLUDED.callback_url, outcome = EXCLUDED.outcome, reason = EXCLUDED.reason,
			at_ns = EXCLUDED.at_ns, reported = false`,
		f.AgentID, f.JobID, f.InstanceID, f.ScheduleID, nsOf(f.FireAt), f.CallbackURL,
		f.Outcome, f.Reason, nsOf(f.At))
	if err != nil {
		return fail("record last fire", err)
	}
	return nil
}

// ForgetLastFire implements relay.LastFires.
func (r *records) ForgetLastFire(ctx context.Context, agentID, jobID string) error {
	if _, err := r.pool.Exec(ctx, `DELETE FROM chronos_last_fires WHERE agent_id = $1 AND job_id = $2`, agentID, jobID); err != nil {
		return fail("forget last fire", err)
	}
	return nil
}

// lastFireColumns are the columns of a judged record that scanLastFire
// reads, in its order.
const lastFireColumns = `agent_id, job_id, instance_id, schedule_id, fire_at_ns, callback_url, outcome, reason, at_ns`

// scanLastFire reads one row of lastFireColumns, plus extra destinations.
func scanLastFire(row pgx.Row, extra ...any) (relay.LastFire, error) {
	var (
		f              relay.LastFire
		fireAtNs, atNs int64
	)
	dest := []any{&f.AgentID, &f.JobID, &f.InstanceID, &f.ScheduleID, &fireAtNs, &f.CallbackURL, &f.Outcome, &f.Reason, &atNs}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return relay.LastFire{}, err
	}
	f.FireAt = fromNs(fireAtNs)
	f.At = fromNs(atNs)
	return f, nil
}

// expireNs is an expiry as the statements take it: records whose outcome
// is before it are dropped; none for the zero time.
func expireNs(expireBefore time.Time) int64 {
	if expireBefore.IsZero() {
		return math.MinInt64
	}
	return expireBefore.UnixNano()
}

// judgeSQL judges the records "scope" selects (a WHERE condition on l, the
// record) against the armed rows: a record older than the expiry, or whose
// job holds a one-shot of another schedule id (armed again since), is
// dropped, unless it changed meanwhile. It leaves CTEs "judged" (the
// records kept, with armed: whether the job holds a one-shot) and
// "dropped".
//
// $1 expire before ns, then the scope's own parameters.
func judgeSQL(scope string) string {
	return `WITH met AS MATERIALIZED (
			SELECT l.agent_id, l.job_id, l.instance_id, l.schedule_id, l.fire_at_ns, l.callback_url,
				l.outcome, l.reason, l.at_ns, l.reported, f.schedule_id AS armed_id
			FROM chronos_last_fires l
			LEFT JOIN chronos_fires f ON f.agent_id = l.agent_id AND f.job_id = l.job_id
			WHERE ` + scope + `
		),
		dropped AS (
			DELETE FROM chronos_last_fires l USING met m
			WHERE l.agent_id = m.agent_id AND l.job_id = m.job_id
				AND l.schedule_id = m.schedule_id AND l.at_ns = m.at_ns
				AND (m.at_ns < $1::bigint OR m.armed_id <> m.schedule_id)
		),
		judged AS (
			SELECT m.*, m.armed_id IS NOT NULL AS armed FROM met m
			WHERE m.at_ns >= $1::bigint AND (m.armed_id IS NULL OR m.armed_id = m.schedule_id)
		)`
}

// LastFiresOf implements relay.LastFires: the agent's records by their
// primary key, judged in the same statement.
func (r *records) LastFiresOf(ctx context.Context, agentID string, expireBefore time.Time) ([]relay.LastFire, error) {
	rows, err := r.pool.Query(ctx, judgeSQL(`l.agent_id = $2`)+`
		SELECT `+lastFireColumns+` FROM judged ORDER BY job_id`, expireNs(expireBefore), agentID)
	if err != nil {
		return nil, fail("last fires", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (relay.LastFire, error) { return scanLastFire(row) })
	if err != nil {
		return nil, fail("last fires", err)
	}
	return out, nil
}

// Unarmed implements relay.LastFires in one statement: the records at or
// before q.Before (of one agent by the primary key, else by the index
// chronos_last_fires_at) are judged, the superseded and expired dropped, and
// up to q.Max+1 of those whose job holds no one-shot returned, oldest
// first; with q.Mark the returned ones are marked reported, and New is set
// on those this statement marked: of processes marking at once, one only.
func (r *records) Unarmed(ctx context.Context, q relay.UnarmedQuery) ([]relay.UnarmedFire, bool, error) {
	if q.Max <= 0 {
		q.Max = defaultUnarmedMax
	}
	before := int64(math.MaxInt64)
	if !q.Before.IsZero() {
		before = q.Before.UnixNano()
	}
	scope := `l.at_ns <= $2::bigint`
	args := []any{expireNs(q.ExpireBefore), before, q.Max, q.Mark}
	if q.AgentID != "" {
		scope = `l.agent_id = $5 AND l.at_ns <= $2::bigint`
		args = append(args, q.AgentID)
	}
	rows, err := r.pool.Query(ctx, judgeSQL(scope)+`,
		found AS (
			SELECT j.*, row_number() OVER (ORDER BY j.at_ns, j.agent_id, j.job_id) AS n FROM judged j
			WHERE NOT j.armed
			ORDER BY j.at_ns, j.agent_id, j.job_id LIMIT $3::bigint + 1
		),
		marked AS (
			UPDATE chronos_last_fires l SET reported = true FROM found x
			WHERE $4::boolean AND x.n <= $3::bigint AND NOT l.reported
				AND l.agent_id = x.agent_id AND l.job_id = x.job_id
				AND l.schedule_id = x.schedule_id AND l.at_ns = x.at_ns
			RETURNING l.agent_id, l.job_id
		)
		SELECT `+lastFireColumns+`,
			EXISTS (SELECT 1 FROM marked m WHERE m.agent_id = found.agent_id AND m.job_id = found.job_id)
		FROM found ORDER BY n`, args...)
	if err != nil {
		return nil, false, fail("unarmed", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (relay.UnarmedFire, error) {
		var u relay.UnarmedFire
		var err error
		u.LastFire, err = scanLastFire(row, &u.New)
		return u, err
	})
	if err != nil {
		return nil, false, fail("unarmed", err)
	}
	more := len(out) > q.Max
	if more {
		out = out[:q.Max]
	}
	return out, more, nil
}
