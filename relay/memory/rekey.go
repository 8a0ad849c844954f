package memory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RaiseRekeyFloor implements relay.Control. The floor is kept in whole
// milliseconds, rounded up, as the Redis engine keeps it.
func (ct *control) RaiseRekeyFloor(ctx context.Context, agentID string, at time.Time) (time.Time, error) {
	if agentID == "" {
		return time.Time{}, errors.New("memory: raise rekey floor: empty agent id")
	}
	if err := ct.lock(ctx); err != nil {
		return time.Time{}, fmt.Errorf("memory: raise rekey floor: %w", err)
	}
	defer ct.mu.Unlock()
	if ct.rekey == nil {
		ct.rekey = make(map[string]time.Time)
	}
	floor := time.UnixMilli(ceilMs(at)).UTC()
	if cur, ok := ct.rekey[agentID]; !ok || floor.After(cur) {
		ct.rekey[agentID] = floor
	}
	return ct.rekey[agentID], nil
}

// RekeyFloor implements relay.Control.
func (ct *control) RekeyFloor(ctx context.Context, agentID string) (time.Time, error) {
	if err := ct.lock(ctx); err != nil {
		return time.Time{}, fmt.Errorf("memory: rekey floor: %w", err)
	}
	defer ct.mu.Unlock()
	return ct.rekey[agentID], nil
}
