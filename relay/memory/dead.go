package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// deadLetters is the engine's relay.DeadLetters, and the failed-fire feed
// of relay.Armed.
type deadLetters struct{ *core }

// deadEntry is one dead letter.
type deadEntry struct {
	dl  relay.DeadLetter
	seq uint64 // kill order: ListDead pages newest (highest) first
	// superseded is set when the job was armed again after this fire died:
	// a replay then drops it instead of re-arming a stale fire.
	superseded bool
}

// failedRef is one entry of an agent's failed-fire feed: a dead letter the
// agent has not acknowledged.
type failedRef struct {
	id string    // schedule id of the dead letter
	at time.Time // when it was dead-lettered
}

// ListFailed implements relay.Armed. It forgets the feed entries that
// expired or whose dead letter was replayed.
func (ds *deadLetters) ListFailed(ctx context.Context, agentID string, keep time.Duration, max int) ([]relay.DeadLetter, error) {
	if max <= 0 {
		max = relay.FailedFeedCap
	}
	if err := ds.lock(ctx); err != nil {
		return nil, fmt.Errorf("memory: list failed: %w", err)
	}
	defer ds.mu.Unlock()
	expired := ds.expiry(keep)
	feed := slices.DeleteFunc(ds.failed[agentID], func(f failedRef) bool {
		return expired(f) || ds.dead[f.id] == nil
	})
	if len(feed) == 0 {
		delete(ds.failed, agentID)
		return nil, nil
	}
	ds.failed[agentID] = feed
	out := make([]relay.DeadLetter, 0, min(max, len(feed)))
	for _, f := range feed[:min(max, len(feed))] {
		out = append(out, ds.dead[f.id].dl)
	}
	return out, nil
}

// AckFailed implements relay.Armed.
func (ds *deadLetters) AckFailed(ctx context.Context, agentID string, keep time.Duration, scheduleIDs []string) (int, error) {
	if err := ds.lock(ctx); err != nil {
		return 0, fmt.Errorf("memory: ack failed: %w", err)
	}
	defer ds.mu.Unlock()
	ack := make(map[string]bool, len(scheduleIDs))
	for _, id := range scheduleIDs {
		ack[id] = true
	}
	n := 0
	expired := ds.expiry(keep)
	feed := slices.DeleteFunc(ds.failed[agentID], func(f failedRef) bool {
		if !ack[f.id] {
			return false
		}
		if !expired(f) && ds.dead[f.id] != nil {
			n++
		}
		return true
	})
	if len(feed) == 0 {
		delete(ds.failed, agentID)
	} else {
		ds.failed[agentID] = feed
	}
	return n, nil
}

// expiry returns whether a feed entry is older than keep by the engine's
// clock now (never when keep <= 0).
func (ds *deadLetters) expiry(keep time.Duration) func(failedRef) bool {
	if keep <= 0 {
		return func(failedRef) bool { return false }
	}
	cutoff := ds.now().Add(-keep)
	return func(f failedRef) bool { return f.at.Before(cutoff) }
}

// ListDead implements relay.DeadLetters. agentID "" lists every agent's; a
// cursor is bound to the filter it was issued for; limit <= 0 means 100.
func (ds *deadLetters) ListDead(ctx context.Context, agentID, cursor string, limit int) ([]relay.DeadLetter, string, error) {
	var before uint64
	if cursor != "" {
		s, err := relay.DecodeCursor(relay.CursorDead, agentID, cursor)
		if err != nil {
			return nil, "", fmt.Errorf("memory: list dead: %w", err)
		}
		if _, err := fmt.Sscanf(s, "%d", &before); err != nil || before == 0 {
			return nil, "", fmt.Errorf("memory: list dead: %w", relay.ErrInvalidCursor)
		}
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	if err := ds.lock(ctx); err != nil {
		return nil, "", fmt.Errorf("memory: list dead: %w", err)
	}
	defer ds.mu.Unlock()
	i := len(ds.deadList) - 1
	if cursor != "" {
		i, _ = slices.BinarySearchFunc(ds.deadList, before, func(d *deadEntry, s uint64) int {
			switch {
			case d.seq < s:
				return -1
			case d.seq > s:
				return 1
			}
			return 0
		})
		i-- // the first entry older than the cursor
	}
	var items []relay.DeadLetter
	var last uint64
	for ; i >= 0; i-- {
		d := ds.deadList[i]
		if agentID != "" && d.dl.AgentID != agentID {
			continue
		}
		if len(items) == limit {
			return items, relay.EncodeCursor(relay.CursorDead, agentID, fmt.Sprint(last)), nil
		}
		items = append(items, d.dl)
		last = d.seq
	}
	return items, "", nil
}

// Replay implements relay.DeadLetters: the check for unknown ids and the
// replay are one step under the lock.
func (ds *deadLetters) Replay(ctx context.Context, scheduleIDs []string) (relay.ReplayResult, error) {
	if err := ds.lock(ctx); err != nil {
		return relay.ReplayResult{}, fmt.Errorf("memory: replay: %w", err)
	}
	defer ds.mu.Unlock()
	ids := relay.UniqueIDs(scheduleIDs)
	var unknown []string
	for _, id := range ids {
		if ds.dead[id] == nil {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return relay.ReplayResult{}, fmt.Errorf("memory: replay: %w", &relay.UnknownDeadLettersError{ScheduleIDs: unknown})
	}
	return ds.replayAll(ids), nil
}

// ReplayAgent implements relay.DeadLetters.
func (ds *deadLetters) ReplayAgent(ctx context.Context, agentID string) (relay.ReplayResult, error) {
	if err := ds.lock(ctx); err != nil {
		return relay.ReplayResult{}, fmt.Errorf("memory: replay agent: %w", err)
	}
	defer ds.mu.Unlock()
	var ids []string
	for _, d := range ds.deadList {
		if d.dl.AgentID == agentID {
			ids = append(ids, d.dl.ScheduleID)
		}
	}
	return ds.replayAll(ids), nil
}

// replayAll replays the dead letters ids (each present) and wakes the
// dispatchers when it re-armed any; the caller holds the lock.
func (ds *deadLetters) replayAll(ids []string) relay.ReplayResult {
	var res relay.ReplayResult
	for _, id := range ids {
		dl, rearmed, ok := ds.replay(id)
		switch {
		case !ok:
			res.Missing = append(res.Missing, id)
		case rearmed:
			res.Replayed = append(res.Replayed, dl)
		default:
			res.Dropped = append(res.Dropped, relay.DroppedDeadLetter{DeadLetter: dl, Reason: relay.ReplayDropRearmed})
		}
	}
	if len(res.Replayed) > 0 {
		ds.signal()
	}
	return res
}

// replay takes one dead letter out and re-arms it unless its job was armed
// again since; it returns the dead letter, whether it re-armed it, and
// whether there was one.
func (ds *deadLetters) replay(id string) (relay.DeadLetter, bool, bool) {
	d := ds.dead[id]
	if d == nil {
		return relay.DeadLetter{}, false, false
	}
	delete(ds.dead, id)
	if i, ok := slices.BinarySearchFunc(ds.deadList, d.seq, func(x *deadEntry, s uint64) int {
		switch {
		case x.seq < s:
			return -1
		case x.seq > s:
			return 1
		}
		return 0
	}); ok {
		ds.deadList = slices.Delete(ds.deadList, i, i+1)
	}
	k := key{d.dl.AgentID, d.dl.JobID}
	ids := slices.DeleteFunc(ds.deadJobs[k], func(s string) bool { return s == id })
	if len(ids) == 0 {
		delete(ds.deadJobs, k)
	} else {
		ds.deadJobs[k] = ids
	}
	if d.superseded || ds.rows[k] != nil || ds.byID[id] != nil {
		return d.dl, false, true
	}
	now := ds.now()
	shot := d.dl.OneShot
	shot.Attempt = 0
	shot.State = relay.StateArmed
	shot.DueAt = now
	ds.seq++
	ds.insert(&entry{shot: shot, dueMs: now.UnixMilli(), seq: ds.seq, dueIdx: -1, leasIdx: -1})
	return d.dl, true, true
}
