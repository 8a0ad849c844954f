package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.History = (*Engine)(nil)

// minuteCounts is a minute's counters as chronos_history_minutes keeps
// them: "o:<outcome>", "r" (retries) and "l:<lag bucket>", zeros left out.
func minuteCounts(m relay.HistoryMinute) map[string]int64 {
	c := make(map[string]int64, len(m.Outcomes)+len(m.Lag)+1)
	for o, n := range m.Outcomes {
		if n != 0 {
			c["o:"+o] += n
		}
	}
	if m.Retries != 0 {
		c["r"] += m.Retries
	}
	for i, n := range m.Lag {
		if n != 0 {
			c["l:"+strconv.Itoa(i)] += n
		}
	}
	return c
}

// historyMinute reads minuteCounts back.
func historyMinute(minuteMs int64, counts map[string]int64) relay.HistoryMinute {
	m := relay.HistoryMinute{Minute: fromMs(minuteMs), Outcomes: map[string]int64{},
		Lag: make([]int64, len(relay.HistoryLagBounds)+1)}
	for k, n := range counts {
		switch {
		case k == "r":
			m.Retries = n
		case strings.HasPrefix(k, "o:"):
			m.Outcomes[k[2:]] = n
		case strings.HasPrefix(k, "l:"):
			if b, err := strconv.Atoi(k[2:]); err == nil && b >= 0 && b < len(m.Lag) {
				m.Lag[b] = n
			}
		}
	}
	return m
}

// addHistorySQL adds minutes into the stored ones (chronos_counts_add, in
// minute order, so that two processes adding the same minutes lock them in
// the same order), appends recent deliveries, trims each agent's to
// relay.HistoryRecent and forgets what is past relay.HistoryRetention by the
// engine's clock (indexes chronos_history_minutes' key,
// chronos_recent_deliveries_at): one statement. Deletes skip the rows
// another process is deleting, so that two at once never wait for each
// other.
//
// $1 minutes (ms), $2 their counts (jsonb), $3 agents of the recent
// deliveries, $4 their At (ms), $5 the records (jsonb), $6 clock,
// $7 retention ms.
const addHistorySQL = `
WITH now AS (SELECT chronos_now_ms($6) AS ms),
minutes AS (
	INSERT INTO chronos_history_minutes AS h (minute_ms, counts)
	SELECT m, c FROM unnest($1::bigint[], $2::jsonb[]) AS x(m, c) ORDER BY m
	ON CONFLICT (minute_ms) DO UPDATE SET counts = chronos_counts_add(h.counts, EXCLUDED.counts)
),
old_minutes AS (
	DELETE FROM chronos_history_minutes WHERE ctid = ANY (ARRAY (
		SELECT ctid FROM chronos_history_minutes WHERE minute_ms < (SELECT ms FROM now) - $7::bigint
		FOR UPDATE SKIP LOCKED))
),
recent AS (
	INSERT INTO chronos_recent_deliveries (agent_id, at_ms, record)
	SELECT a, t, r FROM unnest($3::text[], $4::bigint[], $5::jsonb[]) WITH ORDINALITY AS x(a, t, r, i) ORDER BY i
),
added AS (
	SELECT a AS agent_id, count(*) AS n FROM unnest($3::text[]) AS x(a) GROUP BY a
),
trimmed AS (
	DELETE FROM chronos_recent_deliveries WHERE ctid = ANY (ARRAY (
		SELECT o.ctid FROM added
		CROSS JOIN LATERAL (
			SELECT r.ctid FROM chronos_recent_deliveries r WHERE r.agent_id = added.agent_id
			ORDER BY r.seq DESC OFFSET greatest(` + "%d" + ` - added.n, 0) FOR UPDATE SKIP LOCKED
		) o))
),
old_recent AS (
	DELETE FROM chronos_recent_deliveries WHERE ctid = ANY (ARRAY (
		SELECT ctid FROM chronos_recent_deliveries WHERE at_ms < (SELECT ms FROM now) - $7::bigint
		FOR UPDATE SKIP LOCKED))
)
SELECT 1`

// AddHistory implements relay.History in one statement (addHistorySQL).
// An agent's recent deliveries beyond the newest relay.HistoryRecent of a
// call are not stored.
func (h *deliveryHistory) AddHistory(ctx context.Context, minutes []relay.HistoryMinute, recent []relay.DeliveryRecord) error {
	if len(minutes) == 0 && len(recent) == 0 {
		return nil
	}
	// One row per minute: minutes given twice are added together first.
	byMinute := map[int64]map[string]int64{}
	for _, m := range minutes {
		k := m.Minute.Unix() / 60 * 60_000
		c := byMinute[k]
		if c == nil {
			c = map[string]int64{}
			byMinute[k] = c
		}
		for name, n := range minuteCounts(m) {
			c[name] += n
		}
	}
	keys := slices.Sorted(maps.Keys(byMinute))
	counts := make([]string, 0, len(keys))
	kept := keys[:0]
	for _, k := range keys {
		if len(byMinute[k]) == 0 {
			continue
		}
		b, err := json.Marshal(byMinute[k])
		if err != nil {
			return fail("add history", err)
		}
		kept = append(kept, k)
		counts = append(counts, string(b))
	}
	// The newest relay.HistoryRecent of each agent, in order.
	perAgent := map[string]int{}
	for _, r := range recent {
		perAgent[r.AgentID]++
	}
	var (
		agents  []string
		ats     []int64
		records []string
	)
	for _, r := range recent {
		if perAgent[r.AgentID] > relay.HistoryRecent {
			perAgent[r.AgentID]--
			continue
		}
		b, err := json.Marshal(r)
		if err != nil {
			return fail("add history", err)
		}
		agents = append(agents, r.AgentID)
		ats = append(ats, r.At.UnixMilli())
		records = append(records, string(b))
	}
	_, err := h.pool.Exec(ctx, fmt.Sprintf(addHistorySQL, relay.HistoryRecent),
		kept, counts, agents, ats, records, h.now(), relay.HistoryRetention.Milliseconds())
	if err != nil {
		return fail("add history", err)
	}
	return nil
}

// HistoryMinutes implements relay.History: a range of the minutes' key.
func (h *deliveryHistory) HistoryMinutes(ctx context.Context, from, to time.Time) ([]relay.HistoryMinute, error) {
	// The first minute starting at or after from, up to the last starting
	// before to.
	first := (from.Unix() + 59) / 60 * 60_000
	end := (to.Unix() + 59) / 60 * 60_000
	if end <= first {
		return nil, nil
	}
	rows, err := h.pool.Query(ctx, `SELECT minute_ms, counts FROM chronos_history_minutes
		WHERE minute_ms >= $1 AND minute_ms < $2 ORDER BY minute_ms`, first, end)
	if err != nil {
		return nil, fail("history minutes", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (relay.HistoryMinute, error) {
		var (
			ms     int64
			counts map[string]int64
		)
		if err := row.Scan(&ms, &counts); err != nil {
			return relay.HistoryMinute{}, err
		}
		return historyMinute(ms, counts), nil
	})
	if err != nil {
		return nil, fail("history minutes", err)
	}
	return out, nil
}

// RecentDeliveries implements relay.History: the agent's newest by the
// primary key.
func (h *deliveryHistory) RecentDeliveries(ctx context.Context, agentID string, max int) ([]relay.DeliveryRecord, error) {
	if max <= 0 || max > relay.HistoryRecent {
		max = relay.HistoryRecent
	}
	rows, err := h.pool.Query(ctx, `SELECT record FROM chronos_recent_deliveries
		WHERE agent_id = $1 AND at_ms >= chronos_now_ms($3) - $4::bigint
		ORDER BY seq DESC LIMIT $2`, agentID, max, h.now(), relay.HistoryRetention.Milliseconds())
	if err != nil {
		return nil, fail("recent deliveries", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[relay.DeliveryRecord])
	if err != nil {
		return nil, fail("recent deliveries", err)
	}
	return out, nil
}

// LastDeliveries implements relay.History: each agent's newest record, the
// agents found by skipping along the primary key (one index probe per
// agent, not a read of every record).
func (h *deliveryHistory) LastDeliveries(ctx context.Context) (map[string]relay.DeliveryRecord, error) {
	rows, err := h.pool.Query(ctx, `
		WITH RECURSIVE agents AS (
			(SELECT agent_id FROM chronos_recent_deliveries ORDER BY agent_id LIMIT 1)
			UNION ALL
			SELECT (SELECT r.agent_id FROM chronos_recent_deliveries r WHERE r.agent_id > a.agent_id
				ORDER BY r.agent_id LIMIT 1)
			FROM agents a WHERE a.agent_id IS NOT NULL
		)
		SELECT a.agent_id, n.record FROM agents a
		CROSS JOIN LATERAL (SELECT r.record, r.at_ms FROM chronos_recent_deliveries r WHERE r.agent_id = a.agent_id
			ORDER BY r.seq DESC LIMIT 1) n
		WHERE a.agent_id IS NOT NULL AND n.at_ms >= chronos_now_ms($1) - $2::bigint`,
		h.now(), relay.HistoryRetention.Milliseconds())
	if err != nil {
		return nil, fail("last deliveries", err)
	}
	defer rows.Close()
	out := map[string]relay.DeliveryRecord{}
	for rows.Next() {
		var (
			agent string
			rec   relay.DeliveryRecord
		)
		if err := rows.Scan(&agent, &rec); err != nil {
			return nil, fail("last deliveries", err)
		}
		out[agent] = rec
	}
	if err := rows.Err(); err != nil {
		return nil, fail("last deliveries", err)
	}
	return out, nil
}

// DueHistogram implements relay.History: the armed one-shots (queued, by
// the index chronos_fires_due, and held, by chronos_fires_held) counted by
// step of their due time.
func (h *deliveryHistory) DueHistogram(ctx context.Context, from time.Time, step time.Duration, n int) ([]int64, error) {
	if step <= 0 || n <= 0 {
		return nil, fmt.Errorf("postgres: due histogram: step %s and n %d must be positive", step, n)
	}
	fromMs, stepMs := from.UnixMilli(), max(step.Milliseconds(), 1)
	toMs := fromMs + int64(n)*stepMs
	rows, err := h.pool.Query(ctx, `
		SELECT i, count(*) FROM (
			SELECT (due_ms - $1::bigint) / $2::bigint AS i FROM chronos_fires
			WHERE state = 0 AND due_ms >= $1::bigint AND due_ms < $3::bigint
			UNION ALL
			SELECT (due_ms - $1::bigint) / $2::bigint FROM chronos_fires
			WHERE state = 1 AND due_ms >= $1::bigint AND due_ms < $3::bigint
		) x GROUP BY i`, fromMs, stepMs, toMs)
	if err != nil {
		return nil, fail("due histogram", err)
	}
	defer rows.Close()
	out := make([]int64, n)
	for rows.Next() {
		var i, c int64
		if err := rows.Scan(&i, &c); err != nil {
			return nil, fail("due histogram", err)
		}
		if i >= 0 && i < int64(n) {
			out[i] += c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fail("due histogram", err)
	}
	return out, nil
}

// Beat implements relay.History.
func (h *deliveryHistory) Beat(ctx context.Context, p relay.ProcessBeat) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fail("beat", err)
	}
	_, err = h.pool.Exec(ctx, `INSERT INTO chronos_beats (id, kind, beat_ns, beat) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET kind = EXCLUDED.kind, beat_ns = EXCLUDED.beat_ns, beat = EXCLUDED.beat`,
		p.ID, p.Kind, nsOf(p.BeatAt), string(b))
	if err != nil {
		return fail("beat", err)
	}
	return nil
}

// Processes implements relay.History: the beats at or after since, the
// older ones deleted in the same statement.
func (h *deliveryHistory) Processes(ctx context.Context, since time.Time) ([]relay.ProcessBeat, error) {
	rows, err := h.pool.Query(ctx, `
		WITH gone AS (DELETE FROM chronos_beats WHERE beat_ns < $1)
		SELECT beat FROM chronos_beats WHERE beat_ns >= $1`, nsOf(since))
	if err != nil {
		return nil, fail("processes", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[relay.ProcessBeat])
	if err != nil {
		return nil, fail("processes", err)
	}
	relay.SortBeats(out)
	return out, nil
}
