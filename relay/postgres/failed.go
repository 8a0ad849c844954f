package postgres

import (
	"context"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// feedKeepMs is a retention as the statements take it: whole milliseconds, at
// least 1 when positive, 0 for forever.
func feedKeepMs(keep time.Duration) int64 {
	if keep <= 0 {
		return 0
	}
	return max(keep.Milliseconds(), 1)
}

// ListFailed implements relay.Armed: the agent's dead letters still in its
// feed (index chronos_dead_feed), oldest first. Entries past the retention
// leave the feed as they are met.
func (d *deadLetters) ListFailed(ctx context.Context, agentID string, keep time.Duration, max int) ([]relay.DeadLetter, error) {
	if max <= 0 || max > relay.FailedFeedCap {
		max = relay.FailedFeedCap
	}
	rows, err := d.pool.Query(ctx, `
		WITH now AS (SELECT chronos_now_ms($2) AS ms),
		expired AS (
			UPDATE chronos_dead SET in_feed = false
			WHERE agent_id = $1 AND in_feed AND $3::bigint > 0 AND failed_ms < (SELECT ms FROM now) - $3::bigint
		)
		SELECT `+deadLetterColumns+` FROM chronos_dead
		WHERE agent_id = $1 AND in_feed AND ($3::bigint = 0 OR failed_ms >= (SELECT ms FROM now) - $3::bigint)
		ORDER BY failed_ms, seq LIMIT $4`,
		agentID, d.now(), feedKeepMs(keep), max)
	if err != nil {
		return nil, fail("list failed", err)
	}
	defer rows.Close()
	var out []relay.DeadLetter
	for rows.Next() {
		dl, _, err := scanDeadLetter(rows)
		if err != nil {
			return nil, fail("list failed", err)
		}
		out = append(out, dl)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("list failed", err)
	}
	return out, nil
}

// AckFailed implements relay.Armed: the entries leave the agent's feed (the
// dead letters stay); those within the retention are counted.
func (d *deadLetters) AckFailed(ctx context.Context, agentID string, keep time.Duration, scheduleIDs []string) (int, error) {
	if len(scheduleIDs) == 0 {
		return 0, nil
	}
	var n int
	err := d.pool.QueryRow(ctx, `
		WITH now AS (SELECT chronos_now_ms($2) AS ms),
		acked AS (
			UPDATE chronos_dead SET in_feed = false
			WHERE schedule_id = ANY($4) AND agent_id = $1 AND in_feed
			RETURNING failed_ms
		)
		SELECT count(*) FROM acked WHERE $3::bigint = 0 OR failed_ms >= (SELECT ms FROM now) - $3::bigint`,
		agentID, d.now(), feedKeepMs(keep), scheduleIDs).Scan(&n)
	if err != nil {
		return 0, fail("ack failed", err)
	}
	return n, nil
}
