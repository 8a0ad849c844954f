package memory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RaiseRekeyFloor implements relay.Control. The floor is kept in whole
// milliseconds, rounded up, as the Redis engine keeps it.
func (e *Engine) RaiseRekeyFloor(ctx context.Context, agentID string, at time.Time) (time.Time, error) {
	if agentID == "" {
		return time.Time{}, errors.New("memory: raise rekey floor: empty agent id")
	}
	if err := e.lock(ctx); err != nil {
		return time.Time{}, fmt.Errorf("memory: raise rekey floor: %w", err)
	}
	defer e.mu.Unlock()
	if e.rekey == nil {
		e.rekey = make(map[string]time.Time)
	}
	floor := time.UnixMilli(ceilMs(at)).UTC()
	if cur, ok := e.rekey[agentID]; !ok || floor.After(cur) {
		e.rekey[agentID] = floor
	}
	return e.rekey[agentID], nil
}

// RekeyFloor implements relay.Control.
func (e *Engine) RekeyFloor(ctx context.Context, agentID string) (time.Time, error) {
	if err := e.lock(ctx); err != nil {
		return time.Time{}, fmt.Errorf("memory: rekey floor: %w", err)
	}
	defer e.mu.Unlock()
	return e.rekey[agentID], nil
}
