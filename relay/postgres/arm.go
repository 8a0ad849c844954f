package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/chronoscron/chronos/relay"
)

// Arm implements relay.Armed: one call of chronos_arm
// (schema/0001_queue.sql) upserts the row, under the agent's quota, and
// announces a wake-up when the fire is due already or before every queued
// one. (Arms are not group-committed: PostgreSQL already shares the flush
// of commits that wait at once, and a batch of arms would keep one
// connection busy where concurrent arms keep several.)
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
	var status int32
	var replaced string
	var woke bool
	r, err := scanOneShot(q.pool.QueryRow(ctx, `SELECT * FROM chronos_arm($1, $2, $3, $4, $5, $6, $7, $8, $9,
		$10, $11, $12, $13, $14, $15, $16)`,
		q.now(), wakeChannel(q.schema), req.AgentID, req.JobID, req.ScheduleID, req.InstanceID,
		req.FireAt.UnixNano(), req.FireAtSpelling, req.CallbackURL, durMillis(req.Flex), ceilMillis(due),
		int32(min(max(req.MaxArmed, 0), math.MaxInt32)), sealed, kid, minted, keep), &status, &replaced, &woke)
	if err != nil {
		return relay.ArmResult{}, fail("arm", err)
	}
	if status < 0 {
		return relay.ArmResult{}, fmt.Errorf("postgres: arm %s/%s: %w", req.AgentID, req.JobID, relay.ErrQuotaExceeded)
	}
	if woke {
		q.wake.Notify() // this process's dispatchers need not wait for the echo
	}
	// A retry whose first try was applied but whose reply was lost finds
	// its own schedule id in place: that arm did change the row.
	changed := status&1 == 1 || r.shot.ScheduleID == req.ScheduleID
	return relay.ArmResult{OneShot: r.shot, Changed: changed, Replaced: replaced, Rekeyed: status&2 == 2}, nil
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
