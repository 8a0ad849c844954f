package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/contract"
)

// recordFailedFires writes the failed fires NAS reported, and those kept
// from earlier attempts, to the ledger as missed, and returns the schedule
// ids that are now durably accounted for, for NAS to forget. The ledger
// takes one line per job and slot: a fire NAS reports again (its
// acknowledgement was lost, or it died again after a replay) adds nothing,
// and is acknowledged again. A fire that could not be written is not
// acknowledged (NAS lists it again) and is kept in the state too, for a NAS
// that reports each failed fire only once.
func (r *Reconciler) recordFailedFires(ctx context.Context, st *State, res *Result, reported []contract.FailedFire, fail func(op, jobID string, err error)) []string {
	all := append(st.PendingMissed, reported...)
	// One ledger write per job and slot, acknowledging every schedule id
	// reported for it.
	type slotFires struct {
		fire contract.FailedFire
		ids  []string
	}
	var order []string
	bySlot := map[string]*slotFires{}
	for _, f := range all {
		key := f.JobID + "@" + contract.FormatTime(f.FireAt.Time)
		sf := bySlot[key]
		if sf == nil {
			sf = &slotFires{fire: f}
			bySlot[key] = sf
			order = append(order, key)
		}
		if f.ScheduleID != "" && !slices.Contains(sf.ids, f.ScheduleID) {
			sf.ids = append(sf.ids, f.ScheduleID)
		}
	}
	var keep []contract.FailedFire
	var ack []string
	for _, key := range order {
		f := bySlot[key].fire
		reason := fmt.Sprintf("NAS gave up after %d attempts: %s", f.Attempts, f.Reason)
		wrote, err := r.cfg.Source.RecordMissed(ctx, f.JobID, f.FireAt.Time, reason)
		if err != nil {
			fail("record missed", f.JobID, err)
			keep = append(keep, f)
			continue
		}
		ack = append(ack, bySlot[key].ids...)
		if wrote {
			res.MissedRecorded++
			r.cfg.Logger.Warn("fire failed at NAS; recorded missed", "job_id", f.JobID, "fire_at", f.FireAt, "schedule_id", f.ScheduleID, "reason", f.Reason)
		}
	}
	if len(keep) > maxPendingMissed {
		keep = keep[len(keep)-maxPendingMissed:]
	}
	st.PendingMissed = keep
	return ack
}

// ackFailedFires tells NAS that the failed fires with these schedule ids are
// recorded, so it stops listing them. A failure is a failed step: the fires
// stay listed, and the next reconcile, finding them recorded, acknowledges
// them again. A NAS without acknowledgements needs none.
func (r *Reconciler) ackFailedFires(ctx context.Context, ids []string, fail func(op, jobID string, err error)) {
	if len(ids) == 0 {
		return
	}
	n, err := r.cfg.NAS.AckFailedFires(ctx, ids)
	switch {
	case errors.Is(err, nasclient.ErrUnsupported):
		r.cfg.Logger.Debug("NAS takes no acknowledgement of failed fires; it reports each once", "error", err)
	case err != nil:
		fail("ack failed fires", "", err)
	default:
		r.cfg.Logger.Info("failed fires acknowledged to NAS", "sent", len(ids), "acknowledged", n)
	}
}
