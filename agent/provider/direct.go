package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/contract"
)

// Direct delivery (cron.chronos.delivery: direct). Every provision asks for
// it, and NAS's answer decides: a direct answer carries the job's cron key,
// which is written to the home's key store (package cronkeys) before the
// provision counts as done; a NAS-mediated answer (NAS's agents file does
// not allow it) leaves the job without a current key. So that a fire which
// arrives the moment NAS answers finds its key, the provision is marked in
// progress in the store while it runs: the verifier waits for it on a key
// it does not know yet.
//
// The reconcile provisions an arm that is otherwise unchanged when its
// delivery is not what the agent wants: NAS holds it for direct delivery but
// the agent has no key for it (the agent died between NAS's answer and the
// write: the answer is asked for again, and NAS returns the job's current
// key), the agent wants direct delivery and NAS holds it mediated (unless
// NAS refused direct delivery for the job before), or the agent wants
// mediated delivery and NAS holds it direct. After Rekey, it provisions
// every direct arm, so that each answer carries the job's new key.
// Cancelling a job drops its keys at once; the keys of jobs that no longer
// exist are dropped at the next reconcile.

// openKeys opens the key store of Home unless one is given; direct delivery
// needs one.
func (c *ReconcilerConfig) openKeys() error {
	switch c.Delivery {
	case "", contract.DeliveryNAS, contract.DeliveryDirect:
	default:
		return fmt.Errorf("provider: delivery %q is not a delivery mode (want %q or %q)", c.Delivery, contract.DeliveryDirect, contract.DeliveryNAS)
	}
	if c.Keys != nil || c.Home == "" {
		if c.Keys == nil && c.Delivery == contract.DeliveryDirect {
			return errors.New("provider: direct delivery needs a home for the jobs' cron keys")
		}
		return nil
	}
	keys, err := cronkeys.Open(c.Home, cronkeys.Options{Now: c.Now, Logger: c.Logger})
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	c.Keys = keys
	return nil
}

// direct reports whether the reconciler asks for direct delivery.
func (r *Reconciler) direct() bool { return r.cfg.Delivery == contract.DeliveryDirect }

// askDelivery is the delivery a provision asks for: "direct", or none.
func (r *Reconciler) askDelivery() string {
	if r.direct() {
		return contract.DeliveryDirect
	}
	return ""
}

// Keys returns the key store of the reconciler's home (nil without one).
func (r *Reconciler) Keys() *cronkeys.Store { return r.cfg.Keys }

// Rekey asks the next reconcile, soon, to provision every direct job again
// (NAS re-keyed the agent: each answer carries the job's new key). It never
// blocks.
func (r *Reconciler) Rekey() {
	r.rekey.Store(true)
	r.gen.Add(1)
	r.inSync.Store(false)
	r.Resync()
}

// rekeying reports whether the reconcile in progress re-keys jobID.
func (r *Reconciler) rekeying(jobID string) bool { return r.rekeyJobs[jobID] }

// listedDelivery is the delivery of an arm NAS lists, as Arm.Delivery
// keeps it.
func listedDelivery(a contract.ArmedJob) string {
	if a.Delivery == contract.DeliveryDirect {
		return contract.DeliveryDirect
	}
	return ""
}

// answeredDelivery is the delivery NAS armed a provision with, as
// Arm.Delivery keeps it.
func answeredDelivery(out contract.ProvisionResponse) string {
	if out.Delivery == contract.DeliveryDirect {
		return contract.DeliveryDirect
	}
	return ""
}

// planDelivery moves the unchanged arms whose delivery is not what the
// agent wants, and on a re-key every direct one, to the provisions of o's
// plan, and drops the keys of jobs that no longer exist.
func (r *Reconciler) planDelivery(ctx context.Context, listing nasclient.Listing, o *observation, fail func(op, jobID string, err error)) {
	r.rekeyJobs = nil
	keys := r.cfg.Keys
	if keys != nil && o.jobs != nil {
		if err := keys.Keep(ctx, func(id string) bool { return o.jobs[id] }); err != nil {
			fail("drop cron keys", "", err)
		}
	}
	rekey := r.rekey.Swap(false)
	if keys == nil {
		return
	}
	listed := map[string]contract.ArmedJob{}
	for _, a := range listing.Armed {
		listed[a.JobID] = a
	}
	var keep []Arm
	for _, a := range o.plan.Unchanged {
		l := listed[a.JobID]
		heldDirect := l.Delivery == contract.DeliveryDirect
		var why string
		switch {
		case r.direct() && rekey:
			why = "re-key"
			if r.rekeyJobs == nil {
				r.rekeyJobs = map[string]bool{}
			}
			r.rekeyJobs[a.JobID] = true
		case r.direct() && heldDirect && !keys.Direct(a.JobID):
			why = "NAS holds it for direct delivery and the agent has no key for it"
		case r.direct() && !heldDirect && keys.Direct(a.JobID):
			why = "NAS holds it mediated, the agent has a key for it"
		case r.direct() && !heldDirect && !refused(keys, a.JobID):
			why = "NAS holds it mediated; the agent asks for direct delivery"
		case !r.direct() && heldDirect:
			why = "NAS holds it for direct delivery; the agent asks for mediated delivery"
		case !r.direct() && keys.Direct(a.JobID):
			why = "the agent has a key for a job NAS holds mediated"
		}
		if why == "" {
			keep = append(keep, a)
			continue
		}
		r.cfg.Logger.Info("arming again for the delivery mode", "job_id", a.JobID, "fire_at", a.FireAt, "why", why)
		o.plan.Provision = append(o.plan.Provision, a)
		r.inSync.Store(false)
	}
	o.plan.Unchanged = keep
	if rekey && !r.direct() {
		r.cfg.Logger.Info("NAS asked for a re-key; this agent does not use direct delivery")
	}
}

// refused reports whether NAS answered the last direct provision of jobID
// with mediated delivery.
func refused(keys *cronkeys.Store, jobID string) bool {
	j, ok := keys.Job(jobID)
	return ok && j.Refused
}

// provisionKeyed provisions p (see provisionWithinHorizon) and records the
// answer in the key store before it returns: a direct answer's key is
// written before the provision counts as done, and a fire that arrives
// meanwhile waits for it (cronkeys.Store.Begin).
func (r *Reconciler) provisionKeyed(ctx context.Context, p *Arm, slot time.Time) (contract.ProvisionResponse, error) {
	keys := r.cfg.Keys
	if keys == nil {
		return r.provisionWithinHorizon(ctx, p, slot)
	}
	end := keys.Begin(p.JobID)
	defer end()
	out, err := r.provisionWithinHorizon(ctx, p, slot)
	if err != nil {
		return out, err
	}
	if r.direct() && out.Delivery != contract.DeliveryDirect {
		r.cfg.Logger.Warn("NAS armed the fire for mediated delivery, not direct (its agents file does not allow direct delivery for this agent)", "job_id", p.JobID, "fire_at", p.FireAt)
	}
	if err := keys.Provisioned(ctx, p.JobID, p.FireAt, r.askDelivery(), out); err != nil {
		return out, fmt.Errorf("storing the job's cron key: %w", err)
	}
	return out, nil
}

// dropKeys forgets jobID's keys.
func (r *Reconciler) dropKeys(ctx context.Context, jobID string) error {
	if r.cfg.Keys == nil {
		return nil
	}
	return r.cfg.Keys.Drop(ctx, jobID)
}
