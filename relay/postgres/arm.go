package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chronoscron/chronos/relay"
)

// errQuotaCode is the SQLSTATE chronos_arm raises over an agent's quota.
const errQuotaCode = "CQ001"

// Arm implements relay.Armed: chronos_arm (schema/0001_queue.sql) upserts
// the row, under the agent's quota, and announces a wake-up when the fire
// is due before every queued one. Arms are group-committed (see group):
// those that arrive while a batch is in flight go out together in the next
// statement (chronos_arm_many), one commit for them all.
func (q *queue) Arm(ctx context.Context, req relay.ArmRequest) (relay.ArmResult, error) {
	switch {
	case req.AgentID == "" || req.JobID == "" || req.ScheduleID == "":
		return relay.ArmResult{}, errors.New("postgres: arm: agent id, job id and schedule id are required")
	case req.FireAt.IsZero() || req.FireAt.UnixNano() < 0:
		return relay.ArmResult{}, fmt.Errorf("postgres: arm: fire_at %s is not after 1970", req.FireAt)
	case req.Flex < 0 || req.Flex > relay.MaxFlex:
		return relay.ArmResult{}, fmt.Errorf("postgres: arm: flexible window %s is not within 0 and %s", req.Flex, relay.MaxFlex)
	case !req.DueAt.IsZero() && (req.DueAt.Before(req.FireAt) || req.DueAt.After(req.FireAt.Add(req.Flex))):
		return relay.ArmResult{}, fmt.Errorf("postgres: arm: due %s is outside the window of fire_at %s (flex %s)", req.DueAt, req.FireAt, req.Flex)
	}
	due := req.FireAt
	if !req.DueAt.IsZero() {
		due = req.DueAt
	}
	var sealed, kid string
	var minted, keep int64
	if d := req.Direct; d.IsDirect() {
		if d.KeyID == "" || d.MintedAt.IsZero() || d.MintedAt.UnixNano() < 0 {
			return relay.ArmResult{}, errors.New("postgres: arm: a direct fire needs its key id and mint time")
		}
		sealed, kid, minted = d.Sealed, d.KeyID, d.MintedAt.UnixNano()
		keep = nsOf(req.KeepKeyFrom)
	}
	c := &armCall{req: req, dueMs: ceilMillis(due), sealed: sealed, kid: kid, minted: minted, keep: keep}
	err := submit(ctx, &q.state().arms, c, armBatch, q.sendArms)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return relay.ArmResult{}, fmt.Errorf("postgres: arm: %w", err)
		}
		return relay.ArmResult{}, err
	}
	return c.res, nil
}

// armBatch bounds the arms of one statement (each is a subtransaction of
// it, and a transaction keeps the ids of its first 64 in memory).
const armBatch = 32

// armCall is one arm of a batch: its request with the values chronos_arm
// takes, and its result.
type armCall struct {
	req                 relay.ArmRequest
	dueMs, minted, keep int64
	sealed, kid         string
	res                 relay.ArmResult
}

// sendArms arms one batch with one call of chronos_arm_many
// (schema/0001_queue.sql), one commit for them all, and answers each
// caller. An arm that lost a deadlock is sent again by itself.
func (q *queue) sendArms(ctx context.Context, batch []*groupReq[*armCall]) {
	calls := make([]*armCall, len(batch))
	for i, r := range batch {
		calls[i] = r.v
	}
	errs := q.armMany(ctx, calls)
	for i, err := range errs {
		for try := 0; try < 2 && isDeadlock(err); try++ {
			err = q.armMany(ctx, calls[i:i+1])[0]
		}
		batch[i].done <- err
	}
}

// armMany runs one statement of arms, in agent and job order (so that
// batches running at once take their locks in one order), and returns each
// arm's error; results go to the calls.
func (q *queue) armMany(ctx context.Context, calls []*armCall) []error {
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := calls[a].req, calls[b].req
		return cmp.Or(cmp.Compare(x.AgentID, y.AgentID), cmp.Compare(x.JobID, y.JobID))
	})
	n := len(calls)
	var (
		agents, jobs, sids, instances, spellings = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		callbacks, sealed, kids                  = make([]string, n), make([]string, n), make([]string, n)
		fireNs, flexMs, dueMs, minted, keep      = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		quotas                                   = make([]int32, n)
	)
	for i, k := range order {
		c := calls[k]
		r := c.req
		agents[i], jobs[i], sids[i], instances[i], spellings[i] = r.AgentID, r.JobID, r.ScheduleID, r.InstanceID, r.FireAtSpelling
		callbacks[i], sealed[i], kids[i] = r.CallbackURL, c.sealed, c.kid
		fireNs[i], flexMs[i], dueMs[i], minted[i], keep[i] = r.FireAt.UnixNano(), durMillis(r.Flex), c.dueMs, c.minted, c.keep
		quotas[i] = int32(min(max(r.MaxArmed, 0), math.MaxInt32))
	}
	errs := make([]error, n)
	answered := make([]bool, n)
	woke := false
	err := func() error {
		rows, err := q.pool.Query(ctx, `SELECT * FROM chronos_arm_many($1, $2, $3::text[], $4::text[], $5::text[],
			$6::text[], $7::bigint[], $8::text[], $9::text[], $10::bigint[], $11::bigint[], $12::integer[],
			$13::text[], $14::text[], $15::bigint[], $16::bigint[])`,
			q.now(), wakeChannel(q.schema), agents, jobs, sids, instances, fireNs, spellings, callbacks, flexMs,
			dueMs, quotas, sealed, kids, minted, keep)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var idx, status int32
			var code, msg, replaced string
			var w bool
			r, err := scanOneShot(rows, &idx, &code, &msg, &status, &replaced, &w)
			if err != nil {
				return err
			}
			if idx < 1 || int(idx) > n {
				woke = woke || w // the batch's own announcement (index 0)
				continue
			}
			k := order[idx-1]
			c := calls[k]
			answered[k] = true
			switch {
			case code == errQuotaCode:
				errs[k] = fmt.Errorf("postgres: arm %s/%s: %w", c.req.AgentID, c.req.JobID, relay.ErrQuotaExceeded)
			case code != "":
				errs[k] = fail("arm", &pgconn.PgError{Code: code, Message: msg, Severity: "ERROR"})
			default:
				woke = woke || w
				// A retry whose first try was applied but whose reply was
				// lost finds its own schedule id in place: that arm did
				// change the row.
				c.res = relay.ArmResult{OneShot: r.shot, Changed: status&1 == 1 || r.shot.ScheduleID == c.req.ScheduleID,
					Replaced: replaced, Rekeyed: status&2 == 2}
			}
		}
		return rows.Err()
	}()
	if woke {
		q.wake.Notify() // this process's dispatchers need not wait for the echo
	}
	for k := range calls {
		switch {
		case err != nil:
			errs[k] = fail("arm", err)
		case !answered[k] && errs[k] == nil:
			errs[k] = errors.New("postgres: arm: no answer for the arm")
		}
	}
	return errs
}

// Cancel implements relay.Armed.
func (q *queue) Cancel(ctx context.Context, agentID, jobID string) (bool, error) {
	var n int32
	err := q.pool.QueryRow(ctx, `SELECT chronos_cancel($1, $2, $3)`, wakeChannel(q.schema), agentID, jobID).Scan(&n)
	if err != nil {
		return false, fail("cancel", err)
	}
	if n == 2 {
		q.wake.Notify()
	}
	return n > 0, nil
}

// CancelAgent implements relay.Control: every one-shot of the agent goes;
// its flow control record (policy, probe, phase) stays.
func (q *queue) CancelAgent(ctx context.Context, agentID string) (int, error) {
	var n int32
	if err := q.pool.QueryRow(ctx, `SELECT chronos_cancel_agent($1)`, agentID).Scan(&n); err != nil {
		return 0, fail("cancel agent", err)
	}
	return int(n), nil
}
