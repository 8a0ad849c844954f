package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// records is the engine's relay.LastFires and relay.Instances.
type records struct{ *core }

// defaultUnarmedMax bounds an Unarmed answer when the query sets no Max.
const defaultUnarmedMax = 1000

// lastFireRecord is one job's last fire and whether Unarmed reported it.
type lastFireRecord struct {
	fire     relay.LastFire
	reported bool
}

// judged is what a record is worth against the armed rows: kept (the job
// has no one-shot, or still the one the record is about) or superseded.
// unarmed says the job has no one-shot at all. The caller holds mu.
func (rs *records) judge(r *lastFireRecord, expireBefore time.Time) (keep, unarmed bool) {
	if !expireBefore.IsZero() && r.fire.At.Before(expireBefore) {
		return false, false
	}
	ent := rs.rows[key{r.fire.AgentID, r.fire.JobID}]
	switch {
	case ent == nil:
		return true, true
	case ent.shot.ScheduleID == r.fire.ScheduleID:
		return true, false // its ack is on the way
	default:
		return false, false // armed again since
	}
}

// forget drops the record of (agent, job). The caller holds mu.
func (rs *records) forget(agent, job string) {
	jobs := rs.lastFires[agent]
	delete(jobs, job)
	if len(jobs) == 0 {
		delete(rs.lastFires, agent)
	}
}

// RecordLastFire implements relay.LastFires.
func (rs *records) RecordLastFire(ctx context.Context, f relay.LastFire) error {
	if f.AgentID == "" || f.JobID == "" || f.ScheduleID == "" || f.Outcome == "" {
		return errors.New("memory: record last fire: agent id, job id, schedule id and outcome are required")
	}
	if err := rs.lock(ctx); err != nil {
		return fmt.Errorf("memory: record last fire: %w", err)
	}
	defer rs.mu.Unlock()
	if rs.lastFires == nil {
		rs.lastFires = make(map[string]map[string]*lastFireRecord)
	}
	jobs := rs.lastFires[f.AgentID]
	if jobs == nil {
		jobs = make(map[string]*lastFireRecord)
		rs.lastFires[f.AgentID] = jobs
	}
	jobs[f.JobID] = &lastFireRecord{fire: f}
	return nil
}

// ForgetLastFire implements relay.LastFires.
func (rs *records) ForgetLastFire(ctx context.Context, agentID, jobID string) error {
	if err := rs.lock(ctx); err != nil {
		return fmt.Errorf("memory: forget last fire: %w", err)
	}
	defer rs.mu.Unlock()
	rs.forget(agentID, jobID)
	return nil
}

// LastFiresOf implements relay.LastFires.
func (rs *records) LastFiresOf(ctx context.Context, agentID string, expireBefore time.Time) ([]relay.LastFire, error) {
	if err := rs.lock(ctx); err != nil {
		return nil, fmt.Errorf("memory: last fires: %w", err)
	}
	defer rs.mu.Unlock()
	var out []relay.LastFire
	for job, r := range rs.lastFires[agentID] {
		if keep, _ := rs.judge(r, expireBefore); !keep {
			rs.forget(agentID, job)
			continue
		}
		out = append(out, r.fire)
	}
	slices.SortFunc(out, func(a, b relay.LastFire) int { return cmp.Compare(a.JobID, b.JobID) })
	return out, nil
}

// Unarmed implements relay.LastFires.
func (rs *records) Unarmed(ctx context.Context, q relay.UnarmedQuery) ([]relay.UnarmedFire, bool, error) {
	if q.Max <= 0 {
		q.Max = defaultUnarmedMax
	}
	if err := rs.lock(ctx); err != nil {
		return nil, false, fmt.Errorf("memory: unarmed: %w", err)
	}
	defer rs.mu.Unlock()
	var found []*lastFireRecord
	visit := func(agent string, jobs map[string]*lastFireRecord) {
		for job, r := range jobs {
			keep, unarmed := rs.judge(r, q.ExpireBefore)
			if !keep {
				rs.forget(agent, job)
				continue
			}
			if unarmed && !r.fire.At.After(q.Before) {
				found = append(found, r)
			}
		}
	}
	if q.AgentID != "" {
		visit(q.AgentID, rs.lastFires[q.AgentID])
	} else {
		for agent, jobs := range rs.lastFires {
			visit(agent, jobs)
		}
	}
	slices.SortFunc(found, func(a, b *lastFireRecord) int {
		return cmp.Or(a.fire.At.Compare(b.fire.At), cmp.Compare(a.fire.AgentID, b.fire.AgentID), cmp.Compare(a.fire.JobID, b.fire.JobID))
	})
	more := len(found) > q.Max
	if more {
		found = found[:q.Max]
	}
	out := make([]relay.UnarmedFire, 0, len(found))
	for _, r := range found {
		u := relay.UnarmedFire{LastFire: r.fire}
		if q.Mark {
			u.New = !r.reported
			r.reported = true
		}
		out = append(out, u)
	}
	return out, more, nil
}

// NoteInstance implements relay.Instances.
func (rs *records) NoteInstance(ctx context.Context, instanceID string, state relay.InstanceState, at time.Time) error {
	if err := state.Check(); err != nil {
		return fmt.Errorf("memory: note instance: %w", err)
	}
	if err := rs.lock(ctx); err != nil {
		return fmt.Errorf("memory: note instance: %w", err)
	}
	defer rs.mu.Unlock()
	info := rs.instance(instanceID)
	if state == relay.InstanceStopped {
		info.StoppedAt = at
	} else {
		info.StartedAt = at
	}
	return nil
}

// SetInstanceCallback implements relay.Instances.
func (rs *records) SetInstanceCallback(ctx context.Context, instanceID, callbackURL string) error {
	if err := rs.lock(ctx); err != nil {
		return fmt.Errorf("memory: set instance callback: %w", err)
	}
	defer rs.mu.Unlock()
	rs.instance(instanceID).CallbackURL = callbackURL
	return nil
}

// Instance implements relay.Instances.
func (rs *records) Instance(ctx context.Context, instanceID string) (relay.InstanceInfo, error) {
	if err := rs.lock(ctx); err != nil {
		return relay.InstanceInfo{}, fmt.Errorf("memory: instance: %w", err)
	}
	defer rs.mu.Unlock()
	info := relay.InstanceInfo{InstanceID: instanceID}
	if i := rs.instances[instanceID]; i != nil {
		info = *i
	}
	info.Stopped = rs.stopped[instanceID]
	return info, nil
}

// instance returns the record of instanceID, creating it. The caller holds
// mu.
func (rs *records) instance(id string) *relay.InstanceInfo {
	if rs.instances == nil {
		rs.instances = make(map[string]*relay.InstanceInfo)
	}
	i := rs.instances[id]
	if i == nil {
		i = &relay.InstanceInfo{InstanceID: id}
		rs.instances[id] = i
	}
	return i
}
