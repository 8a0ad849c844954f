package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// control is the engine's relay.Control and relay.Census.
type control struct{ *core }

// SetInstanceState implements relay.Control.
func (ct *control) SetInstanceState(ctx context.Context, instanceID string, state relay.InstanceState) error {
	if err := state.Check(); err != nil {
		return fmt.Errorf("memory: set instance state: %w", err)
	}
	if err := ct.lock(ctx); err != nil {
		return fmt.Errorf("memory: set instance state: %w", err)
	}
	defer ct.mu.Unlock()
	if state == relay.InstanceStopped {
		ct.stopped[instanceID] = true
	} else {
		delete(ct.stopped, instanceID)
	}
	return nil
}

// InstanceStopped implements relay.Control.
func (ct *control) InstanceStopped(ctx context.Context, instanceID string) (bool, error) {
	if err := ct.lock(ctx); err != nil {
		return false, fmt.Errorf("memory: instance stopped: %w", err)
	}
	defer ct.mu.Unlock()
	return ct.stopped[instanceID], nil
}

// FirstDelivery implements relay.Control. Records are forgotten once their
// ttl has passed.
func (ct *control) FirstDelivery(ctx context.Context, deliveryID string, ttl time.Duration) (bool, error) {
	if err := ct.lock(ctx); err != nil {
		return false, fmt.Errorf("memory: first delivery: %w", err)
	}
	defer ct.mu.Unlock()
	now := ct.now()
	nowMs := now.UnixMilli()
	for len(ct.seenExp) > 0 && ct.seenExp[0].at <= nowMs {
		x := ct.seenExp.pop()
		if exp, ok := ct.seen[x.id]; ok && exp <= nowMs {
			delete(ct.seen, x.id)
		}
	}
	if _, ok := ct.seen[deliveryID]; ok {
		return false, nil
	}
	exp := ceilMs(now.Add(ttl))
	ct.seen[deliveryID] = exp
	ct.seenExp.push(expiry{at: exp, id: deliveryID})
	return true, nil
}

// CancelAgent implements relay.Control.
func (ct *control) CancelAgent(ctx context.Context, agentID string) (int, error) {
	if err := ct.lock(ctx); err != nil {
		return 0, fmt.Errorf("memory: cancel agent: %w", err)
	}
	defer ct.mu.Unlock()
	jobs := slices.Clone(ct.jobs[agentID])
	for _, j := range jobs {
		ct.remove(ct.rows[key{agentID, j}])
	}
	delete(ct.ties, agentID)
	return len(jobs), nil
}
