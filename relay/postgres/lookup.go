package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

// States of a row of chronos_fires (its state column).
const (
	stateQueued = 0 // armed, claimable when due
	stateHeld   = 1 // armed, held back by flow control
	stateLeased = 2 // leased
)

// defaultListLimit is List's page size when the caller gives none.
const defaultListLimit = 100

// oneShotCols are the columns of chronos_fires that scanOneShot reads, in
// its order; the functions of schema/0001_queue.sql that return rows return
// them in the same order.
const oneShotCols = `agent_id, job_id, schedule_id, instance_id, fire_at_ns, fire_at_spelling, callback_url,
	flex_ms, attempt, state, due_ms, token, lease_until_ms, created_ms, last_error,
	direct_sealed, direct_kid, direct_minted_ns`

// shotRow is one row of chronos_fires: the one-shot, and its lease when it
// is leased.
type shotRow struct {
	shot    relay.OneShot
	token   int64
	untilMs int64
}

// lease returns the row as a lease.
func (r shotRow) lease() relay.Lease {
	return relay.Lease{OneShot: r.shot, Token: r.token, Until: fromMs(r.untilMs)}
}

// scanOneShot reads one row of oneShotCols, after the destinations pre.
func scanOneShot(row pgx.Row, pre ...any) (shotRow, error) {
	var (
		r                                   shotRow
		fireNs, flexMs, dueMs, createdMs    int64
		mintedNs                            int64
		attempt                             int32
		state                               int16
		spelling, callback, lastErr, sealed string
		kid, instance                       string
	)
	dest := append(pre, &r.shot.AgentID, &r.shot.JobID, &r.shot.ScheduleID, &instance, &fireNs, &spelling,
		&callback, &flexMs, &attempt, &state, &dueMs, &r.token, &r.untilMs, &createdMs, &lastErr,
		&sealed, &kid, &mintedNs)
	if err := row.Scan(dest...); err != nil {
		return shotRow{}, err
	}
	s := &r.shot
	s.InstanceID = instance
	s.FireAt = fromNs(fireNs)
	s.FireAtSpelling = spelling
	s.CallbackURL = callback
	s.Flex = time.Duration(flexMs) * time.Millisecond
	s.Attempt = int(attempt)
	s.State = relay.StateArmed
	if state == stateLeased {
		s.State = relay.StateLeased
	}
	// The due time is kept in whole milliseconds: one that is fire_at's
	// (rounded up) is fire_at itself.
	s.DueAt = fromMs(dueMs)
	if dueMs == ceilMillis(s.FireAt) {
		s.DueAt = s.FireAt
	}
	s.CreatedAt = fromMs(createdMs)
	s.LastError = lastErr
	if sealed != "" {
		s.Direct = relay.DirectKey{Sealed: sealed, KeyID: kid, MintedAt: fromNs(mintedNs)}
	}
	return r, nil
}

// ceilMillis returns t in Unix milliseconds, rounded up: a due time in whole
// milliseconds is then never earlier than t.
func ceilMillis(t time.Time) int64 {
	v := t.UnixMilli()
	if t.After(time.UnixMilli(v)) {
		v++
	}
	return v
}

// durMillis returns d in whole milliseconds, rounded up (0 for d <= 0).
func durMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Get implements relay.Armed.
func (q *queue) Get(ctx context.Context, agentID, jobID string) (relay.OneShot, error) {
	r, err := scanOneShot(q.pool.QueryRow(ctx,
		`SELECT `+oneShotCols+` FROM chronos_fires WHERE agent_id = $1 AND job_id = $2`, agentID, jobID))
	if errors.Is(err, pgx.ErrNoRows) {
		return relay.OneShot{}, fmt.Errorf("postgres: get %s/%s: %w", agentID, jobID, relay.ErrNotFound)
	}
	if err != nil {
		return relay.OneShot{}, fail("get", err)
	}
	return r.shot, nil
}

// List implements relay.Armed: job ids in byte order (the key columns'
// collation is "C"). A cursor is bound to the agent it was issued for;
// limit <= 0 means 100.
func (q *queue) List(ctx context.Context, agentID, cursor string, limit int) ([]relay.OneShot, string, error) {
	after, err := relay.DecodeCursor(relay.CursorArmed, agentID, cursor)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: list: %w", err)
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	rows, err := q.pool.Query(ctx, `SELECT `+oneShotCols+` FROM chronos_fires
		WHERE agent_id = $1 AND job_id > $2 ORDER BY job_id LIMIT $3`, agentID, after, limit+1)
	if err != nil {
		return nil, "", fail("list", err)
	}
	defer rows.Close()
	var items []relay.OneShot
	for rows.Next() {
		r, err := scanOneShot(rows)
		if err != nil {
			return nil, "", fail("list", err)
		}
		items = append(items, r.shot)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fail("list", err)
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = relay.EncodeCursor(relay.CursorArmed, agentID, items[limit-1].JobID)
	}
	return items, next, nil
}

// Stats implements relay.Engine: counts of the whole store, by the
// engine's clock.
func (q *queue) Stats(ctx context.Context) (relay.Stats, error) {
	var st relay.Stats
	err := q.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM chronos_fires),
		(SELECT count(*) FROM chronos_fires WHERE state = 0 AND due_ms <= chronos_now_ms($1)),
		(SELECT count(*) FROM chronos_fires WHERE state = 2),
		(SELECT count(*) FROM chronos_dead),
		(SELECT count(*) FROM chronos_fires WHERE state = 1),
		(SELECT count(*) FROM chronos_agents WHERE probing)`, q.now()).
		Scan(&st.Armed, &st.Due, &st.Leased, &st.DeadLetter, &st.Held, &st.Probing)
	if err != nil {
		return relay.Stats{}, fail("stats", err)
	}
	return st, nil
}
