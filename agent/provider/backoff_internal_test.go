package provider

import (
	"testing"
	"time"
)

// TestReconcileBackoff: Run's wait after its n-th failure in a row is drawn
// from the upper half of RetryBase doubling up to RetryMax.
func TestReconcileBackoff(t *testing.T) {
	t.Parallel()
	r := &Reconciler{cfg: ReconcilerConfig{RetryBase: time.Second, RetryMax: 5 * time.Minute}}
	for _, tc := range []struct {
		failures int
		ceiling  time.Duration
	}{
		{1, time.Second},
		{2, 2 * time.Second},
		{5, 16 * time.Second},
		{9, 256 * time.Second},
		{10, 5 * time.Minute},
		{1000, 5 * time.Minute},
	} {
		for range 200 {
			if d := r.backoff(tc.failures); d < tc.ceiling/2 || d > tc.ceiling {
				t.Fatalf("after %d failures: wait %s, want within [%s, %s]", tc.failures, d, tc.ceiling/2, tc.ceiling)
			}
		}
	}
}
