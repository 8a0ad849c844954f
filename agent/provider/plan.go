package provider

import (
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/contract"
)

// Plan is what a reconcile does, computed from the two sides.
type Plan struct {
	// Provision holds desired arms NAS lacks or holds at another time,
	// callback URL or flexible window.
	Provision []Arm `json:"provision"`
	// Cancel holds arms NAS holds that the agent does not want.
	Cancel []Arm `json:"cancel"`
	// Delivering holds past arms for the slot their job still waits for:
	// NAS is delivering them, so they are left alone.
	Delivering []Arm `json:"delivering"`
	// Unchanged holds arms that are as desired.
	Unchanged []Arm `json:"unchanged"`
	// Overdue lists jobs waiting for a past slot that NAS is not delivering:
	// the misfire policy must handle them locally.
	Overdue []Arm `json:"overdue"`
}

// InSync reports whether nothing needs doing.
func (p Plan) InSync() bool {
	return len(p.Provision) == 0 && len(p.Cancel) == 0 && len(p.Overdue) == 0
}

// Waiting returns the jobs that wait for a slot at or before now: enabled,
// not finished, with a next_run_at that has come.
func Waiting(jobs []job.Job, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, j := range jobs {
		if j.Enabled && j.FinishedAt == nil && j.NextRunAt != nil && !j.NextRunAt.After(now) {
			out[j.ID] = *j.NextRunAt
		}
	}
	return out
}

func sameURL(a, b string) bool { return strings.TrimRight(a, "/") == strings.TrimRight(b, "/") }

// flexSeconds is a flexible window in the contract's whole seconds.
func flexSeconds(d time.Duration) int64 { return int64(d / time.Second) }

// heldFlex returns the flexible window NAS holds for armed fire a, and
// whether that is known: NAS's flex_seconds when it lists one, else the
// window the agent last provisioned for the same fire (prev, by job id).
// A fire NAS lists without flex_seconds that the agent has no record of is
// unknown: NAS may not list windows at all.
func heldFlex(a contract.ArmedJob, prev map[string]Arm) (int64, bool) {
	if a.FlexSeconds != 0 {
		return a.FlexSeconds, true
	}
	if k, ok := prev[a.JobID]; ok && k.FireAt.Equal(a.FireAt.Time) {
		return k.FlexSeconds, true
	}
	return 0, false
}

// flexDiffers reports whether armed fire a is known to hold another
// flexible window than want (seconds); an unknown window does not differ,
// so a NAS that does not list windows never causes a provision loop.
func flexDiffers(want int64, a contract.ArmedJob, prev map[string]Arm) bool {
	have, ok := heldFlex(a, prev)
	return ok && have != want
}

// ComputePlan compares desired (future fires), waiting (jobs whose slot has
// come, by job id) and armed (NAS's list) for callback at now. Desired
// fires not after now are never armed. A fire NAS lists without
// flex_seconds is taken to hold the flexible window desired: a NAS that
// does not list the window back cannot say it differs (see
// ComputePlanKnown).
func ComputePlan(desired []agent.Desired, waiting map[string]time.Time, armed []contract.ArmedJob, callback string, now time.Time) Plan {
	return ComputePlanKnown(desired, waiting, armed, nil, callback, now)
}

// ComputePlanKnown is ComputePlan with what the agent last provisioned
// (known: the state's armed set): for a fire NAS lists without
// flex_seconds at the instant known holds for its job, the window known
// records is taken as the one NAS holds, so a change of a job's window is
// provisioned even at a NAS that does not list windows, and a NAS that
// does not list them causes no provision after that.
func ComputePlanKnown(desired []agent.Desired, waiting map[string]time.Time, armed []contract.ArmedJob, known []Arm, callback string, now time.Time) Plan {
	var p Plan
	prev := make(map[string]Arm, len(known))
	for _, a := range known {
		prev[a.JobID] = a
	}
	byJob := make(map[string]contract.ArmedJob, len(armed))
	for _, a := range armed {
		byJob[a.JobID] = a
	}
	want := make(map[string]bool, len(desired))
	for _, d := range desired {
		if !d.FireAt.After(now) {
			continue
		}
		want[d.JobID] = true
		arm := Arm{JobID: d.JobID, FireAt: d.FireAt.UTC(), CallbackURL: callback, FlexSeconds: flexSeconds(d.Flex)}
		if a, ok := byJob[d.JobID]; ok && a.FireAt.Equal(d.FireAt) && sameURL(a.AgentCallbackURL, callback) && !flexDiffers(arm.FlexSeconds, a, prev) {
			arm.ScheduleID = a.ScheduleID
			p.Unchanged = append(p.Unchanged, arm)
			continue
		}
		p.Provision = append(p.Provision, arm)
	}
	for _, a := range armed {
		if want[a.JobID] {
			continue
		}
		arm := Arm{JobID: a.JobID, FireAt: a.FireAt.UTC(), ScheduleID: a.ScheduleID, CallbackURL: a.AgentCallbackURL}
		if w, ok := waiting[a.JobID]; ok && w.Equal(a.FireAt.Time) {
			p.Delivering = append(p.Delivering, arm)
			continue
		}
		p.Cancel = append(p.Cancel, arm)
	}
	for id, w := range waiting {
		if a, ok := byJob[id]; ok && a.FireAt.Equal(w) {
			continue
		}
		p.Overdue = append(p.Overdue, Arm{JobID: id, FireAt: w.UTC()})
	}
	for _, s := range [][]Arm{p.Provision, p.Cancel, p.Delivering, p.Unchanged, p.Overdue} {
		slices.SortFunc(s, func(a, b Arm) int { return strings.Compare(a.JobID, b.JobID) })
	}
	return p
}

func desiredArms(desired []agent.Desired, now time.Time, callback string) []Arm {
	out := make([]Arm, 0, len(desired))
	for _, d := range desired {
		if d.FireAt.After(now) {
			out = append(out, Arm{JobID: d.JobID, FireAt: d.FireAt.UTC(), CallbackURL: callback, FlexSeconds: flexSeconds(d.Flex)})
		}
	}
	return out
}
