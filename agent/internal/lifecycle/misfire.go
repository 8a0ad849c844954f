package lifecycle

import (
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
)

// MaxEnumerate bounds how many overdue slots are listed one by one.
const MaxEnumerate = 1000

// overdue is one application of a job's misfire policy to its overdue
// slots, under the store lock.
type overdue struct {
	ad     *Admission
	st     *store.State
	j      *job.Job
	sched  *schedule.Schedule
	now    time.Time
	p      *Plan
	slots  []time.Time // the overdue slots, oldest first, at most MaxEnumerate
	more   bool        // more were overdue than listed
	latest time.Time
	onTime bool // the latest slot is within the grace (Tolerance: after the flexible window)
	grace  time.Duration
	runs   int
}

// misfire applies j's misfire policy to its overdue slots. The caller holds
// the store lock.
func (ad *Admission) misfire(st *store.State, j *job.Job, sched *schedule.Schedule, now time.Time, p *Plan) error {
	o := &overdue{ad: ad, st: st, j: j, sched: sched, now: now, p: p, slots: []time.Time{*j.NextRunAt}, grace: job.Tolerance(j, sched)}
	for {
		n, ok := sched.Next(o.slots[len(o.slots)-1])
		if !ok || n.After(now) {
			break
		}
		if len(o.slots) == MaxEnumerate {
			o.more = true
			break
		}
		o.slots = append(o.slots, n)
	}
	o.latest = o.slots[len(o.slots)-1]
	o.onTime = !o.more && now.Sub(o.latest) <= o.grace
	var err error
	switch j.Misfire {
	case job.MisfireSkip:
		err = o.skip()
	case job.MisfireRunAll:
		err = o.runAll()
	default: // run_once
		for _, s := range o.slots[:len(o.slots)-1] {
			o.missed(s, fmt.Sprintf("misfire run_once: superseded by the run for slot %s", o.latest.Format(time.RFC3339)))
		}
		err = o.run(o.latest)
	}
	if err != nil {
		return err
	}
	if o.more {
		o.missed(now, fmt.Sprintf("misfire: more than %d slots overdue; later ones up to now were not listed", MaxEnumerate))
	}
	j.Repeat.Completed += o.runs
	advance(j, sched, now, now, notRun)
	return nil
}

func (o *overdue) missed(s time.Time, reason string) {
	o.p.endRun(o.j, o.ad.entry(o.j, o.now, runs.Mark{RunID: runs.MissedID(o.j.ID, s), State: ledger.StateMissed, Slot: s, Trig: runs.CatchUp, Reason: reason}))
}

func (o *overdue) trig(s time.Time) runs.Trigger {
	if s.Equal(o.latest) && o.onTime {
		return runs.Scheduled
	}
	return runs.CatchUp
}

// limited reports whether the runs so far reach the job's repeat limit.
func (o *overdue) limited() bool {
	return o.j.Repeat.Times > 0 && o.j.Repeat.Completed+o.runs >= o.j.Repeat.Times
}

func (o *overdue) run(s time.Time) error {
	if o.limited() {
		o.missed(s, "repeat limit reached")
		return nil
	}
	res, err := o.ad.admitStep(o.st, o.j, o.sched, admission{slot: s, trig: o.trig(s)}, o.p)
	if err != nil {
		return err
	}
	if !res.Skipped {
		o.runs++
	}
	return nil
}

// skip is misfire skip: only the latest slot may still run, and only within
// the grace; an earlier one within the grace is superseded by it.
func (o *overdue) skip() error {
	for _, s := range o.slots {
		if s.Equal(o.latest) && o.onTime {
			if err := o.run(s); err != nil {
				return err
			}
			continue
		}
		late := o.now.Sub(s)
		if late > o.grace {
			o.missed(s, fmt.Sprintf("misfire skip: overdue by %s, beyond the grace of %s", late.Round(time.Second), o.grace))
			continue
		}
		o.missed(s, fmt.Sprintf("misfire skip: overdue by %s; superseded by slot %s", late.Round(time.Second), o.latest.Format(time.RFC3339)))
	}
	return nil
}

// runAll is misfire run_all: the first slot runs now, the next ones up to
// the catch-up bound are owed one after another, the rest are missed.
func (o *overdue) runAll() error {
	bound := o.ad.MaxCatchUp
	for i, s := range o.slots {
		switch {
		case i >= bound:
			o.missed(s, fmt.Sprintf("misfire run_all: beyond the catch-up bound of %d slots", bound))
		case i == 0:
			if err := o.run(s); err != nil {
				return err
			}
		case o.limited():
			o.missed(s, "repeat limit reached")
		default:
			o.j.Pending = append(o.j.Pending, job.Pending{RunID: runs.NewID(o.now), Slot: s.UTC(), Trigger: string(o.trig(s)), Attempt: 1,
				Cause: job.PendingCatchUp, Reason: fmt.Sprintf("misfire run_all: catch-up %d/%d", i+1, min(len(o.slots), bound))})
			o.runs++
		}
	}
	return o.ad.drain(o.st, o.j, o.now, o.p)
}
