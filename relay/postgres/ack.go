package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chronoscron/chronos/relay"
)

// ackItem is one ack of a batch, with its fire's last-fire record or nil.
type ackItem struct {
	l   relay.Lease
	rec *relay.LastFire
}

// Ack implements relay.Queue. Acks are group-committed (see group): a
// burst costs a few statements and commits, not one per fire.
func (q *queue) Ack(ctx context.Context, l relay.Lease) error {
	return q.ack(ctx, ackItem{l: l})
}

var _ relay.AckRecorder = (*Engine)(nil)

// AckRecord implements relay.AckRecorder: the record is written by the
// ack's statement, in its transaction, whether or not the lease still
// holds (the fire reached the agent either way).
func (q *queue) AckRecord(ctx context.Context, l relay.Lease, f relay.LastFire) error {
	if f.AgentID == "" || f.JobID == "" || f.ScheduleID == "" || f.Outcome == "" {
		return errors.New("postgres: ack: the last fire's agent id, job id, schedule id and outcome are required")
	}
	return q.ack(ctx, ackItem{l: l, rec: &f})
}

// ackBatch bounds the acks of one statement.
const ackBatch = 256

// groupTimeout bounds one group-committed batch: its callers share it, so
// it does not end with any one caller's context.
const groupTimeout = 10 * time.Second

// group group-commits calls of one kind: while groupSenders batches are
// in flight, the calls that arrive queue up and go out together in the
// next statement, so a burst costs a few commits (each an fsync), not one
// per call, and a lone call waits for nobody.
type group[T any] struct {
	mu       sync.Mutex
	pending  []*groupReq[T]
	inflight int // batches being sent
}

// groupSenders bounds the batches of one group in flight at once: a few,
// so that a burst keeps more than one connection busy.
const groupSenders = 4

// groupReq is one call waiting for its batch; the batch's sender answers
// it on done.
type groupReq[T any] struct {
	v    T
	done chan error
}

// submit queues v on g and waits for its batch: a caller that finds fewer
// than groupSenders batches in flight sends one at once (with what is
// queued); callers that arrive meanwhile wait for a next batch (at most
// max calls), which a goroutine sends. A caller whose ctx ends stops
// waiting, its call still sent.
func submit[T any](ctx context.Context, g *group[T], v T, max int, send func(context.Context, []*groupReq[T])) error {
	req := &groupReq[T]{v: v, done: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, req)
	start := g.inflight < groupSenders
	if start {
		g.inflight++
	}
	g.mu.Unlock()
	if start {
		// Another sender may have taken this call already: then this one
		// sends what is queued, if anything.
		if batch := g.take(max); batch != nil {
			bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
			send(bctx, batch)
			cancel()
			g.mu.Lock()
			more := len(g.pending) > 0
			if !more {
				g.inflight--
			}
			g.mu.Unlock()
			if more {
				go func() {
					for batch := g.take(max); batch != nil; batch = g.take(max) {
						bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
						send(bctx, batch)
						cancel()
					}
				}()
			}
		}
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take removes up to max queued calls; when none is queued it ends its
// sender's turn (one fewer in flight) and returns nil.
func (g *group[T]) take(max int) []*groupReq[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		g.inflight--
		return nil
	}
	n := min(len(g.pending), max)
	batch := g.pending[:n:n]
	g.pending = g.pending[n:]
	if len(g.pending) == 0 {
		g.pending = nil
	}
	return batch
}

// ack queues one ack on the engine's group commit and waits for its batch.
func (q *queue) ack(ctx context.Context, a ackItem) error {
	err := submit(ctx, &q.acks, a, ackBatch, q.sendAcks)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("postgres: ack: %w", err)
	}
	return err
}

// sendAcks sends one batch of acks and answers each of its callers. A
// batch chosen as a deadlock's victim is sent again.
func (q *queue) sendAcks(ctx context.Context, batch []*groupReq[ackItem]) {
	items := make([]ackItem, len(batch))
	for i, r := range batch {
		items[i] = r.v
	}
	var errs []error
	for try := 0; ; try++ {
		errs = q.ackMany(ctx, items)
		if try >= 2 || !slices.ContainsFunc(errs, isDeadlock) {
			break
		}
	}
	for i, r := range batch {
		r.done <- errs[i]
	}
}

// isDeadlock reports whether err is PostgreSQL's deadlock_detected.
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

// ackSQL removes the fires whose lease holds (chronos_ack); ackRecordSQL
// also upserts their last-fire records, in the same statement.
const (
	ackSQL       = `SELECT o_idx, o_woke FROM chronos_ack($1, $2, $3::text[], $4::text[], $5::bigint[])`
	ackRecordSQL = `WITH rec AS (
		INSERT INTO chronos_last_fires AS lf
			(agent_id, job_id, instance_id, schedule_id, fire_at_ns, callback_url, outcome, reason, at_ns, reported)
		SELECT r.agent_id, r.job_id, r.instance_id, r.schedule_id, r.fire_at_ns, r.callback_url, r.outcome,
			r.reason, r.at_ns, false
		FROM unnest($6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[],
			$13::text[], $14::bigint[])
			AS r(agent_id, job_id, instance_id, schedule_id, fire_at_ns, callback_url, outcome, reason, at_ns)
		ON CONFLICT (agent_id, job_id) DO UPDATE SET instance_id = EXCLUDED.instance_id,
			schedule_id = EXCLUDED.schedule_id, fire_at_ns = EXCLUDED.fire_at_ns,
			callback_url = EXCLUDED.callback_url, outcome = EXCLUDED.outcome, reason = EXCLUDED.reason,
			at_ns = EXCLUDED.at_ns, reported = false
	)
	` + ackSQL
)

// ackMany acks a batch in one statement and one transaction, and returns
// each item's error (nil, relay.ErrLeaseLost, or the statement's).
// Fires and records are written in key order, so that batches running at
// once take their locks in the same order.
func (q *queue) ackMany(ctx context.Context, batch []ackItem) []error {
	order := make([]int, len(batch))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := batch[a].l, batch[b].l
		return cmp.Or(cmp.Compare(x.AgentID, y.AgentID), cmp.Compare(x.JobID, y.JobID), cmp.Compare(x.Token, y.Token))
	})
	agents := make([]string, len(batch))
	jobs := make([]string, len(batch))
	tokens := make([]int64, len(batch))
	var recs []*relay.LastFire
	for i, k := range order {
		l := batch[k].l
		agents[i], jobs[i], tokens[i] = l.AgentID, l.JobID, l.Token
		if f := batch[k].rec; f != nil {
			recs = append(recs, f)
		}
	}
	sql, args := ackSQL, []any{q.now(), wakeChannel(q.schema), agents, jobs, tokens}
	if len(recs) > 0 {
		sql, args = ackRecordSQL, append(args, recordArgs(recs)...)
	}
	errs := make([]error, len(batch))
	acked := make([]bool, len(batch))
	woke := false
	err := func() error {
		rows, err := q.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var idx int32
			var w bool
			if err := rows.Scan(&idx, &w); err != nil {
				return err
			}
			if idx >= 1 && int(idx) <= len(order) {
				acked[order[idx-1]] = true
			}
			woke = woke || w
		}
		return rows.Err()
	}()
	if woke {
		q.wake.Notify()
	}
	for i, a := range batch {
		switch {
		case err != nil:
			errs[i] = fail("ack", err)
		case !acked[i]:
			errs[i] = fmt.Errorf("postgres: ack %s: %w", a.l.ScheduleID, relay.ErrLeaseLost)
		}
	}
	return errs
}

// recordArgs are the arrays of ackRecordSQL ($6 on) for records, one per
// job (the last of a job's records in the batch), in key order.
func recordArgs(recs []*relay.LastFire) []any {
	slices.SortStableFunc(recs, func(x, y *relay.LastFire) int {
		return cmp.Or(cmp.Compare(x.AgentID, y.AgentID), cmp.Compare(x.JobID, y.JobID))
	})
	var agents, jobs, instances, ids, callbacks, outcomes, reasons []string
	var fireAt, at []int64
	for i, f := range recs {
		if i+1 < len(recs) && recs[i+1].AgentID == f.AgentID && recs[i+1].JobID == f.JobID {
			continue // a later record of the same job replaces it
		}
		agents = append(agents, f.AgentID)
		jobs = append(jobs, f.JobID)
		instances = append(instances, f.InstanceID)
		ids = append(ids, f.ScheduleID)
		fireAt = append(fireAt, nsOf(f.FireAt))
		callbacks = append(callbacks, f.CallbackURL)
		outcomes = append(outcomes, f.Outcome)
		reasons = append(reasons, f.Reason)
		at = append(at, nsOf(f.At))
	}
	return []any{agents, jobs, instances, ids, fireAt, callbacks, outcomes, reasons, at}
}

// Nack implements relay.Queue. A fire due before every queued one, or of an
// agent with held fires, is announced to every engine of the schema.
func (q *queue) Nack(ctx context.Context, l relay.Lease, delay time.Duration, reason string) error {
	return q.nack(ctx, "nack", l, delay, reason, nil)
}

// Down implements relay.Queue: Nack, and the same statement also starts the
// agent's probe, holds its fires until hold has passed and counts its
// failure.
func (q *queue) Down(ctx context.Context, l relay.Lease, delay, hold time.Duration, reason string) error {
	h := durMillis(hold)
	return q.nack(ctx, "down", l, delay, reason, &h)
}

// nack runs chronos_nack for Nack (hold nil) or Down (hold in ms).
func (q *queue) nack(ctx context.Context, op string, l relay.Lease, delay time.Duration, reason string, hold *int64) error {
	var n int32
	err := q.pool.QueryRow(ctx, `SELECT chronos_nack($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		q.now(), wakeChannel(q.schema), l.AgentID, l.JobID, l.Token, durMillis(delay), reason, hold,
		max(l.AgentFailures, 0)+1).Scan(&n)
	return q.fenced(op, l, n, err)
}

// Kill implements relay.Queue: the fire moves to the dead letter and the
// end of its agent's failed-fire feed in one statement (chronos_kill).
func (q *queue) Kill(ctx context.Context, l relay.Lease, reason string) error {
	var n int32
	err := q.pool.QueryRow(ctx, `SELECT chronos_kill($1, $2, $3, $4, $5, $6, $7)`,
		q.now(), wakeChannel(q.schema), l.AgentID, l.JobID, l.Token, reason, relay.FailedFeedCap).Scan(&n)
	return q.fenced("kill", l, n, err)
}

// fenced maps the 0/1/2 result of a fenced function: 0 the lease is lost, 2
// a wake-up was announced.
func (q *queue) fenced(op string, l relay.Lease, n int32, err error) error {
	if err != nil {
		return fail(op, err)
	}
	switch n {
	case 0:
		return fmt.Errorf("postgres: %s %s: %w", op, l.ScheduleID, relay.ErrLeaseLost)
	case 2:
		q.wake.Notify() // this process's dispatchers need not wait for the echo
	}
	return nil
}
