package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/contract"
)

// observation is both sides as seen at one instant.
type observation struct {
	now     time.Time
	listing nasclient.Listing
	// desired are the fires to arm (a slot beyond the horizon as its
	// refresh point); slots the jobs' real next slots.
	desired []agent.Desired
	slots   []agent.Desired
	waiting map[string]time.Time
	// jobs are the ids of every job the agent has.
	jobs map[string]bool
	plan Plan
	// known is the armed set the state recorded before (see
	// ComputePlanKnown).
	known []Arm
}

// observe compares listing with the agent's jobs; known is the armed set
// as the state last recorded it (see ComputePlanKnown).
func (r *Reconciler) observe(ctx context.Context, listing nasclient.Listing, known []Arm) (observation, error) {
	o := observation{now: r.cfg.Now(), listing: listing, known: known}
	jobs, err := r.cfg.Source.Jobs(ctx)
	if err != nil {
		return o, fmt.Errorf("provider: jobs: %w", err)
	}
	o.desired, err = r.cfg.Source.Desired(ctx)
	if err != nil {
		return o, fmt.Errorf("provider: desired: %w", err)
	}
	o.slots = o.desired
	o.desired = r.withinHorizon(o.desired, o.now)
	o.waiting = Waiting(jobs, o.now)
	o.jobs = make(map[string]bool, len(jobs))
	for _, j := range jobs {
		o.jobs[j.ID] = true
	}
	o.plan = ComputePlanKnown(o.desired, o.waiting, listing.Armed, known, r.cfg.CallbackURL, o.now)
	return o, nil
}

// Observation is both sides as a status page shows them.
type Observation struct {
	// At is the instant of the comparison.
	At time.Time `json:"at"`
	// Desired are the fires the agent wants armed; Armed what NAS holds.
	Desired []Arm `json:"desired"`
	Armed   []Arm `json:"armed"`
	// Plan is what a reconcile would do now.
	Plan Plan `json:"plan"`
	// FailedFires are the failed fires NAS reports that the agent has not
	// acknowledged yet, oldest first: the serving agent records each
	// missed and acknowledges it at its next reconcile. Observing leaves
	// them as they are.
	FailedFires []contract.FailedFire `json:"failed_fires,omitempty"`
}

// Observe lists NAS and the agent and returns what a reconcile would do. It
// is a read: it changes nothing at NAS (failed fires are reported, neither
// recorded nor acknowledged: that is the serving agent's reconcile), in the
// ledger or in the state file.
func (r *Reconciler) Observe(ctx context.Context) (Observation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	listing, err := r.cfg.NAS.List(ctx)
	if err != nil {
		return Observation{}, fmt.Errorf("provider: observe: %w", err)
	}
	out := Observation{FailedFires: listing.FailedFires}
	var known []Arm
	if r.cfg.Home != "" {
		if st, err := ReadState(r.cfg.Home); err == nil {
			known = st.Armed
		}
	}
	o, err := r.observe(ctx, listing, known)
	if err != nil {
		return Observation{}, err
	}
	out.At, out.Plan = o.now, o.plan
	out.Desired = desiredArms(o.desired, o.now, r.cfg.CallbackURL)
	out.Armed = make([]Arm, 0, len(listing.Armed))
	for _, a := range listing.Armed {
		out.Armed = append(out.Armed, Arm{JobID: a.JobID, FireAt: a.FireAt.UTC(), ScheduleID: a.ScheduleID, CallbackURL: a.AgentCallbackURL, FlexSeconds: a.FlexSeconds, Delivery: listedDelivery(a)})
	}
	slices.SortFunc(out.Armed, func(a, b Arm) int { return strings.Compare(a.JobID, b.JobID) })
	return out, nil
}
