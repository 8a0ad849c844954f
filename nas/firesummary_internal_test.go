package nas

import (
	"slices"
	"testing"
	"time"
)

func TestFireSummary(t *testing.T) {
	t.Parallel()
	var f fireSummary
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	at := start
	for i := range 1000 {
		at = start.Add(time.Duration(i) * 50 * time.Millisecond) // 50 s in all
		if args := f.note(at, deliveryDelivered, time.Duration(i)*time.Millisecond); args != nil {
			t.Fatalf("a summary %v after %s", args, at.Sub(start))
		}
	}
	if args := f.note(at, summaryArmed, 0); args != nil {
		t.Fatalf("a summary %v before the period is over", args)
	}
	f.note(at, deliveryRetry, 0)
	got := f.note(start.Add(FireSummaryEvery), deliveryRejected, 0)
	want := []any{"over", "1m0s", summaryArmed, int64(1), deliveryDelivered, int64(1000), deliveryRetry, int64(1),
		deliveryRejected, int64(1), "max_lag_ms", int64(999)}
	if !slices.Equal(got, want) {
		t.Fatalf("summary %v, want %v", got, want)
	}
	// The next period starts afresh.
	if args := f.note(start.Add(FireSummaryEvery+time.Second), deliveryDelivered, time.Second); args != nil {
		t.Fatalf("a summary %v right after the last", args)
	}
	got = f.note(start.Add(2*FireSummaryEvery+time.Second), deliveryDuplicate, 0)
	want = []any{"over", "1m1s", deliveryDelivered, int64(1), deliveryDuplicate, int64(1), "max_lag_ms", int64(1000)}
	if !slices.Equal(got, want) {
		t.Fatalf("second summary %v, want %v", got, want)
	}
}
