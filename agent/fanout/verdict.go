package fanout

import (
	"fmt"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
)

// Verdict is the parent's state once its children ended, and whether its
// reducer runs.
type Verdict struct {
	State  ledger.State
	Reason string
	Reduce bool
}

// Judge decides the parent of sum under tolerance tol (the failed share of
// the items allowed) and the reducer condition on: succeeded when no child
// failed, partial when some failed but no more than tol, failed beyond.
// Zero items succeed at once and reduce only under always.
func Judge(sum Summary, tol float64, on job.ReducerOn) Verdict {
	if sum.Total == 0 {
		return Verdict{State: ledger.StateSucceeded, Reason: "fanout: no items", Reduce: on == job.ReduceAlways}
	}
	failed := sum.Failed + sum.NotRun
	ratio := float64(failed) / float64(sum.Total)
	reason := fmt.Sprintf("fanout: %d items, %d succeeded, %d failed", sum.Total, sum.Succeeded, sum.Failed)
	if sum.NotRun > 0 {
		reason += fmt.Sprintf(", %d not run", sum.NotRun)
	}
	v := Verdict{Reason: reason}
	switch {
	case failed == 0:
		v.State = ledger.StateSucceeded
	case ratio <= tol:
		v.State = ledger.StatePartial
		v.Reason += fmt.Sprintf(" (within tolerance %g)", tol)
	default:
		v.State = ledger.StateFailed
		v.Reason += fmt.Sprintf(" (failure ratio %.3g above tolerance %g)", ratio, tol)
	}
	switch on {
	case job.ReduceAlways:
		v.Reduce = true
	case job.ReduceOnAnySuccess:
		v.Reduce = sum.Succeeded > 0
	default:
		v.Reduce = v.State.Succeeded()
	}
	return v
}
