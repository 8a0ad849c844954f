package activation

import (
	"context"
	"time"
)

// Busy says why the process must stay up, or "" when it may exit.
type Busy func(ctx context.Context) string

// WaitIdle returns nil once the process has been idle for after: no signal
// on activity for that long and busy reporting nothing at that moment. Each
// activity signal restarts the wait; when the wait ends while busy says
// something, it starts again. There is no polling: the only wake-ups are
// activity and the end of a wait. It returns ctx's error if ctx ends first.
func WaitIdle(ctx context.Context, after time.Duration, activity <-chan struct{}, busy Busy) error {
	t := time.NewTimer(after)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-activity:
			t.Reset(after)
		case <-t.C:
			if why := busy(ctx); why != "" {
				t.Reset(after)
				continue
			}
			return nil
		}
	}
}
