package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.Census = (*Engine)(nil)

// ArmedByAgent implements relay.Census.
func (ct *control) ArmedByAgent(ctx context.Context, max int) ([]relay.AgentArmed, bool, error) {
	if err := ct.lock(ctx); err != nil {
		return nil, false, fmt.Errorf("memory: armed by agent: %w", err)
	}
	ids := make([]string, 0, len(ct.jobs))
	for agent, jobs := range ct.jobs {
		if len(jobs) > 0 {
			ids = append(ids, agent)
		}
	}
	slices.Sort(ids)
	max = relay.CensusMax(max)
	more := len(ids) > max
	if more {
		ids = ids[:max]
	}
	out := make([]relay.AgentArmed, 0, len(ids))
	for _, id := range ids {
		out = append(out, relay.AgentArmed{AgentID: id, Armed: int64(len(ct.jobs[id]))})
	}
	ct.mu.Unlock()
	return out, more, nil
}

// StoppedInstances implements relay.Census.
func (ct *control) StoppedInstances(ctx context.Context, max int) ([]string, bool, error) {
	if err := ct.lock(ctx); err != nil {
		return nil, false, fmt.Errorf("memory: stopped instances: %w", err)
	}
	ids := make([]string, 0, len(ct.stopped))
	for id := range ct.stopped {
		ids = append(ids, id)
	}
	ct.mu.Unlock()
	slices.Sort(ids)
	max = relay.CensusMax(max)
	if len(ids) > max {
		return ids[:max], true, nil
	}
	return ids, false, nil
}
