package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/store"
)

// ReasonPaused is the ledger reason of a slot that passed while its job was
// paused, and of an owed run dropped by the pause.
const ReasonPaused = "paused"

// RecordPaused records skipped, with reason "paused", every slot of a
// paused job that has passed and is not recorded yet, and returns how many
// it recorded. It never runs anything. CatchUp does it too.
func (rc *Recovery) RecordPaused(ctx context.Context) (int, error) {
	p := &Plan{}
	err := rc.Store.Update(ctx, func(st *store.State) error {
		p.Reset()
		now := rc.now()
		for _, j := range st.All() {
			rc.SkipPaused(j, now, p)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("agent: record paused slots: %w", err)
	}
	rc.apply(ctx, p)
	return len(p.lines), nil
}

// pausedLine is the ledger reason of what a pause skips.
func pausedLine(j *job.Job) string {
	if j.PausedReason != "" {
		return ReasonPaused + ": " + j.PausedReason
	}
	return ReasonPaused
}

// SkipPaused drops the runs paused job j owes, recording them skipped, and
// records the slots of j from its PausedFrom up to now skipped, at most MaxEnumerate one by one (the last line then says
// later ones were skipped too), and moves PausedFrom to the first slot after
// now. The caller holds the store lock.
func (rc *Recovery) SkipPaused(j *job.Job, now time.Time, p *Plan) {
	if j.Enabled {
		return
	}
	why := pausedLine(j)
	for _, q := range j.Pending {
		p.lines = append(p.lines, rc.entry(j, now, runs.Mark{RunID: q.RunID, State: ledger.StateSkipped, Slot: q.Slot, Trig: runs.Trigger(q.Trigger), Reason: why}))
	}
	j.Pending = nil
	if j.PausedFrom == nil || j.PausedFrom.After(now) {
		return
	}
	sched, err := job.ParseSchedule(j, rc.Location)
	if err != nil {
		return
	}
	slot := *j.PausedFrom
	for n := 1; ; n++ {
		next, ok := sched.Next(slot)
		reason := why
		if n == MaxEnumerate && ok && !next.After(now) {
			reason += "; the later slots up to " + now.UTC().Format(time.RFC3339) + " were skipped too"
			next, ok = sched.Next(now)
		}
		p.lines = append(p.lines, rc.entry(j, now, runs.Mark{RunID: runs.PausedID(j.ID, slot), State: ledger.StateSkipped, Slot: slot, Trig: runs.Scheduled, Reason: reason}))
		if !ok {
			j.PausedFrom = nil
			return
		}
		if slot = next; slot.After(now) {
			break
		}
	}
	j.PausedFrom = utcPtr(slot)
}
