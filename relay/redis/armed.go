package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

// Arm implements relay.Armed: one script writes the row and its due entry.
func (e *Engine) Arm(ctx context.Context, req relay.ArmRequest) (relay.ArmResult, error) {
	if req.AgentID == "" || req.JobID == "" || req.ScheduleID == "" {
		return relay.ArmResult{}, errors.New("redis: arm: agent id, job id and schedule id are required")
	}
	s := e.k.shardOf(req.AgentID)
	fireMs := req.FireAt.UnixMilli()
	fireNs := int64(req.FireAt.Nanosecond() % 1e6)
	if req.FireAt.UnixNano() < 0 {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: fire_at %s before 1970", req.FireAt)
	}
	v, err := e.run(ctx, scriptArm,
		[]string{e.k.rows(s, req.AgentID), e.k.due(s), e.k.lease(s)},
		e.nowArg(), req.JobID, member(req.AgentID, req.JobID), req.ScheduleID,
		req.InstanceID, fireMs, fireNs, req.CallbackURL, max(req.MaxArmed, 0), e.k.wake(), req.FireAtSpelling)
	if err != nil {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", err)
	}
	a, err := array(v)
	if err != nil || len(a) < 2 {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", errReply)
	}
	status, err := integer(a[0])
	if err != nil {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", err)
	}
	if status < 0 {
		return relay.ArmResult{}, fmt.Errorf("redis: arm %s/%s: %w", req.AgentID, req.JobID, relay.ErrQuotaExceeded)
	}
	replaced, err := str(a[1])
	if err != nil {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", err)
	}
	o, err := decodeRow(req.AgentID, req.JobID, a[2:])
	if err != nil {
		return relay.ArmResult{}, fmt.Errorf("redis: arm: %w", err)
	}
	// A retry whose first try was applied but whose reply was lost finds its
	// own schedule id in place: that arm did change the row.
	changed := status == 1 || o.ScheduleID == req.ScheduleID
	return relay.ArmResult{OneShot: o, Changed: changed, Replaced: replaced}, nil
}

// Cancel implements relay.Armed.
func (e *Engine) Cancel(ctx context.Context, agentID, jobID string) (bool, error) {
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptCancel,
		[]string{e.k.rows(s, agentID), e.k.due(s), e.k.lease(s)},
		e.nowArg(), jobID, member(agentID, jobID))
	if err != nil {
		return false, fmt.Errorf("redis: cancel: %w", err)
	}
	n, err := integer(v)
	if err != nil {
		return false, fmt.Errorf("redis: cancel: %w", err)
	}
	return n > 0, nil
}

// Get implements relay.Armed. It reads the row with one HGET and decodes it
// here: Get is on the path of every delivery.
func (e *Engine) Get(ctx context.Context, agentID, jobID string) (relay.OneShot, error) {
	s := e.k.shardOf(agentID)
	var packed []byte
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		packed, err = e.c.HGet(ctx, e.k.rows(s, agentID), jobID).Bytes()
		return err
	})
	if errors.Is(err, goredis.Nil) {
		return relay.OneShot{}, fmt.Errorf("redis: get %s/%s: %w", agentID, jobID, relay.ErrNotFound)
	}
	if err != nil {
		return relay.OneShot{}, fmt.Errorf("redis: get: %w", err)
	}
	f, err := unpackArray(packed)
	if err != nil {
		return relay.OneShot{}, fmt.Errorf("redis: get %s/%s: %w", agentID, jobID, err)
	}
	o, err := decodeRow(agentID, jobID, f)
	if err != nil {
		return relay.OneShot{}, fmt.Errorf("redis: get: %w", err)
	}
	return o, nil
}

// List implements relay.Armed. A cursor is bound to the agent it was issued
// for; limit <= 0 means 100.
func (e *Engine) List(ctx context.Context, agentID, cursor string, limit int) ([]relay.OneShot, string, error) {
	after, err := relay.DecodeCursor(relay.CursorArmed, agentID, cursor)
	if err != nil {
		return nil, "", fmt.Errorf("redis: list: %w", err)
	}
	if limit <= 0 {
		limit = 100
	}
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptList, []string{e.k.rows(s, agentID)}, e.nowArg(), after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("redis: list: %w", err)
	}
	a, err := array(v)
	if err != nil || len(a)%2 != 1 {
		return nil, "", fmt.Errorf("redis: list: %w", errReply)
	}
	more, err := integer(a[0])
	if err != nil {
		return nil, "", fmt.Errorf("redis: list: %w", err)
	}
	items := make([]relay.OneShot, 0, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		job, err := str(a[i])
		if err != nil {
			return nil, "", fmt.Errorf("redis: list: %w", err)
		}
		f, err := array(a[i+1])
		if err != nil {
			return nil, "", fmt.Errorf("redis: list: %w", err)
		}
		o, err := decodeRow(agentID, job, f)
		if err != nil {
			return nil, "", fmt.Errorf("redis: list: %w", err)
		}
		items = append(items, o)
	}
	next := ""
	if more == 1 && len(items) > 0 {
		next = relay.EncodeCursor(relay.CursorArmed, agentID, items[len(items)-1].JobID)
	}
	return items, next, nil
}

// ListFailed implements relay.Armed.
func (e *Engine) ListFailed(ctx context.Context, agentID string, keep time.Duration, max int) ([]relay.DeadLetter, error) {
	if max <= 0 {
		max = relay.FailedFeedCap
	}
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptListFailed,
		[]string{e.k.failed(s, agentID), e.k.dead(s), e.k.failedList(s, agentID)},
		e.nowArg(), keepMs(keep), strconv.Itoa(max))
	if err != nil {
		return nil, fmt.Errorf("redis: list failed: %w", err)
	}
	a, err := array(v)
	if err != nil {
		return nil, fmt.Errorf("redis: list failed: %w", err)
	}
	out := make([]relay.DeadLetter, 0, len(a))
	for _, x := range a {
		d, err := decodeDead(x)
		if err != nil {
			return nil, fmt.Errorf("redis: list failed: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// failedAckBatch is how many schedule ids one AckFailed script takes.
const failedAckBatch = 1000

// AckFailed implements relay.Armed.
func (e *Engine) AckFailed(ctx context.Context, agentID string, keep time.Duration, scheduleIDs []string) (int, error) {
	s := e.k.shardOf(agentID)
	total := 0
	for chunk := range slices.Chunk(scheduleIDs, failedAckBatch) {
		args := make([]any, 0, 2+len(chunk))
		args = append(args, e.nowArg(), keepMs(keep))
		for _, id := range chunk {
			args = append(args, id)
		}
		v, err := e.run(ctx, scriptAckFailed, []string{e.k.failed(s, agentID), e.k.dead(s)}, args...)
		if err != nil {
			return total, fmt.Errorf("redis: ack failed: %w", err)
		}
		n, err := integer(v)
		if err != nil {
			return total, fmt.Errorf("redis: ack failed: %w", err)
		}
		total += int(n)
	}
	return total, nil
}

// keepMs is a retention as the scripts take it: whole milliseconds, at least
// 1 when positive, "0" for forever.
func keepMs(keep time.Duration) string {
	if keep <= 0 {
		return "0"
	}
	return strconv.FormatInt(max(keep.Milliseconds(), 1), 10)
}
