package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

// replayBatch is how many dead letters one replay statement takes.
const replayChunk = 1000

// defaultDeadLimit is ListDead's page size when the caller gives none.
const defaultDeadLimit = 100

// deadLetterColumns are the columns of chronos_dead that scanDeadLetter reads, in its
// order.
const deadLetterColumns = `schedule_id, agent_id, job_id, instance_id, fire_at_ns, fire_at_spelling, callback_url,
	flex_ms, attempt, created_ms, last_error, direct_sealed, direct_kid, direct_minted_ns, reason, failed_ms, seq`

// scanDeadLetter reads one row of deadLetterColumns, plus extra destinations after them.
func scanDeadLetter(row pgx.Row, extra ...any) (relay.DeadLetter, int64, error) {
	var (
		d                                  relay.DeadLetter
		fireAtNs, flexMs, createdMs        int64
		mintedNs, failedMs, seq            int64
		attempt                            int32
		sealed, kid, spelling, cb, lastErr string
	)
	dest := []any{&d.ScheduleID, &d.AgentID, &d.JobID, &d.InstanceID, &fireAtNs, &spelling, &cb,
		&flexMs, &attempt, &createdMs, &lastErr, &sealed, &kid, &mintedNs, &d.Reason, &failedMs, &seq}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return relay.DeadLetter{}, 0, err
	}
	d.FireAt = fromNs(fireAtNs)
	d.FireAtSpelling = spelling
	d.CallbackURL = cb
	d.Flex = time.Duration(flexMs) * time.Millisecond
	d.Attempt = int(attempt)
	d.State = relay.StateDead
	d.CreatedAt = fromMs(createdMs)
	d.LastError = lastErr
	if sealed != "" {
		d.Direct = relay.DirectKey{Sealed: sealed, KeyID: kid, MintedAt: fromNs(mintedNs)}
	}
	d.FailedAt = fromMs(failedMs)
	return d, seq, nil
}

// ListDead implements relay.DeadLetters: newest first (kill order), of one
// agent when agentID is set (index chronos_dead_agent, else
// chronos_dead_order). A cursor is bound to the filter it was issued for;
// limit <= 0 means 100.
func (d *deadLetters) ListDead(ctx context.Context, agentID, cursor string, limit int) ([]relay.DeadLetter, string, error) {
	pos, err := relay.DecodeCursor(relay.CursorDead, agentID, cursor)
	if err != nil {
		return nil, "", fail("list dead", err)
	}
	before := int64(math.MaxInt64) // from the newest
	if pos != "" {
		before, err = strconv.ParseInt(pos, 10, 64)
		if err != nil || before <= 0 {
			return nil, "", fail("list dead", relay.ErrInvalidCursor)
		}
	}
	if limit <= 0 {
		limit = defaultDeadLimit
	}
	// Two statements, so that each plan keeps its index.
	sql := `SELECT ` + deadLetterColumns + ` FROM chronos_dead WHERE seq < $1 ORDER BY seq DESC LIMIT $2`
	args := []any{before, limit + 1}
	if agentID != "" {
		sql = `SELECT ` + deadLetterColumns + ` FROM chronos_dead WHERE agent_id = $3 AND seq < $1 ORDER BY seq DESC LIMIT $2`
		args = append(args, agentID)
	}
	rows, err := d.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fail("list dead", err)
	}
	defer rows.Close()
	var (
		items []relay.DeadLetter
		seqs  []int64
	)
	for rows.Next() {
		dl, seq, err := scanDeadLetter(rows)
		if err != nil {
			return nil, "", fail("list dead", err)
		}
		items = append(items, dl)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fail("list dead", err)
	}
	if len(items) <= limit {
		return items, "", nil
	}
	items = items[:limit]
	return items, relay.EncodeCursor(relay.CursorDead, agentID, strconv.FormatInt(seqs[limit-1], 10)), nil
}

// Replay implements relay.DeadLetters. In one transaction the dead letters
// are locked (an id no longer there is unknown: nothing is replayed) and
// then replayed: an id is never reported Missing.
func (d *deadLetters) Replay(ctx context.Context, scheduleIDs []string) (relay.ReplayResult, error) {
	ids := relay.UniqueIDs(scheduleIDs)
	if len(ids) == 0 {
		return relay.ReplayResult{}, nil
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted) // lock in one order, whoever replays
	var res relay.ReplayResult
	err := d.replayTx(ctx, "replay", func(tx pgx.Tx) ([]string, error) {
		rows, err := tx.Query(ctx, `SELECT schedule_id FROM chronos_dead
			WHERE schedule_id = ANY($1) ORDER BY schedule_id FOR UPDATE`, sorted)
		if err != nil {
			return nil, err
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		if len(found) < len(ids) {
			var unknown []string
			for _, id := range ids {
				if _, ok := slices.BinarySearch(found, id); !ok {
					unknown = append(unknown, id)
				}
			}
			return nil, &relay.UnknownDeadLettersError{ScheduleIDs: unknown}
		}
		return ids, nil
	}, &res)
	if err != nil {
		return relay.ReplayResult{}, err
	}
	// Report in the order of the ids given.
	order := make(map[string]int, len(ids))
	for i, id := range ids {
		order[id] = i
	}
	slices.SortStableFunc(res.Replayed, func(a, b relay.DeadLetter) int { return order[a.ScheduleID] - order[b.ScheduleID] })
	slices.SortStableFunc(res.Dropped, func(a, b relay.DroppedDeadLetter) int { return order[a.ScheduleID] - order[b.ScheduleID] })
	return res, nil
}

// ReplayAgent implements relay.DeadLetters: the agent's dead letters are
// locked and replayed in one transaction, in kill order.
func (d *deadLetters) ReplayAgent(ctx context.Context, agentID string) (relay.ReplayResult, error) {
	var res relay.ReplayResult
	err := d.replayTx(ctx, "replay agent", func(tx pgx.Tx) ([]string, error) {
		// Locked in schedule id order, as Replay locks them.
		rows, err := tx.Query(ctx, `SELECT schedule_id FROM (
				SELECT schedule_id, seq FROM chronos_dead WHERE agent_id = $1
				ORDER BY schedule_id FOR UPDATE) d
			ORDER BY seq`, agentID)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}, &res)
	if err != nil {
		return relay.ReplayResult{}, err
	}
	return res, nil
}

// replayTx runs a replay in one transaction: pick locks the dead letters and
// returns their ids (or an error: nothing is replayed), then they are
// replayed in batches and what was done is added to res. Dispatchers are
// woken after the commit when a fire was re-armed.
func (d *deadLetters) replayTx(ctx context.Context, what string, pick func(pgx.Tx) ([]string, error), res *relay.ReplayResult) error {
	ctx, cancel := bound(ctx) // the transaction as one call
	defer cancel()
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return fail(what, err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	ids, err := pick(tx)
	if err != nil {
		var unknown *relay.UnknownDeadLettersError
		if errors.As(err, &unknown) {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		return fail(what, err)
	}
	if len(ids) == 0 {
		return nil
	}
	var out relay.ReplayResult
	for chunk := range slices.Chunk(ids, replayChunk) {
		if err := d.replayBatch(ctx, tx, chunk, &out); err != nil {
			return fail(what, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(what+": commit", err)
	}
	if len(out.Replayed) > 0 {
		d.wake.Notify()
	}
	*res = out
	return nil
}

// replaySQL takes dead letters $1 out and re-arms each, due now with its
// attempts reset, unless its job is armed (the job was armed again after
// the fire died: the newer fire stands, the dead letter is dropped). Of two
// dead letters of one job, the newer is re-armed. An agent's replayed fires
// take ties 0, 1, 2... in their due millisecond, so that other agents' fires
// due with them come up in between. The re-armed fires' agents
// get their queue rows, and a wake-up is announced at commit.
//
// $1 schedule ids, $2 the clock (chronos_now_ms).
const replaySQL = `
WITH now AS (SELECT chronos_now_ms($2) AS ms),
taken AS (
	DELETE FROM chronos_dead d WHERE d.schedule_id = ANY($1)
	RETURNING ` + deadLetterColumns + `
),
armed AS (
	INSERT INTO chronos_fires AS f (agent_id, job_id, schedule_id, instance_id, fire_at_ns, fire_at_spelling,
		callback_url, flex_ms, attempt, state, due_ms, tie, created_ms, last_error, direct_sealed, direct_kid, direct_minted_ns)
	SELECT t.agent_id, t.job_id, t.schedule_id, t.instance_id, t.fire_at_ns, t.fire_at_spelling,
		t.callback_url, t.flex_ms, 0, 0, now.ms,
		least(row_number() OVER (PARTITION BY t.agent_id ORDER BY t.seq DESC) - 1, 1022),
		t.created_ms, t.last_error, t.direct_sealed, t.direct_kid, t.direct_minted_ns
	FROM taken t, now
	ORDER BY t.seq DESC
	ON CONFLICT DO NOTHING
	RETURNING f.agent_id, f.schedule_id
),
agents AS (
	INSERT INTO chronos_agents (agent_id) SELECT DISTINCT agent_id FROM armed
	ON CONFLICT DO NOTHING
),
notified AS (
	SELECT ` + "%s" + ` FROM (SELECT 1 FROM armed LIMIT 1) x
)
SELECT t.schedule_id, t.agent_id, t.job_id, t.instance_id, t.fire_at_ns, t.fire_at_spelling, t.callback_url,
	t.flex_ms, t.attempt, t.created_ms, t.last_error, t.direct_sealed, t.direct_kid, t.direct_minted_ns,
	t.reason, t.failed_ms, t.seq,
	EXISTS (SELECT 1 FROM armed a WHERE a.schedule_id = t.schedule_id),
	(SELECT count(*) FROM notified)
FROM taken t
ORDER BY t.seq`

// replayBatch replays the locked dead letters ids in tx and adds what it
// did to res.
func (d *deadLetters) replayBatch(ctx context.Context, tx pgx.Tx, ids []string, res *relay.ReplayResult) error {
	rows, err := tx.Query(ctx, fmt.Sprintf(replaySQL, d.notifySQL()), ids, d.now())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			rearmed  bool
			notified int64
		)
		dl, _, err := scanDeadLetter(rows, &rearmed, &notified)
		if err != nil {
			return err
		}
		if rearmed {
			res.Replayed = append(res.Replayed, dl)
		} else {
			res.Dropped = append(res.Dropped, relay.DroppedDeadLetter{DeadLetter: dl, Reason: relay.ReplayDropRearmed})
		}
	}
	return rows.Err()
}
