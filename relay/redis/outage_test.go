package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// TestStoppedRedisFailsCallsInTime pauses redis-server (SIGSTOP: connections
// still open, nothing answered): a call under a call timeout or a deadline
// fails by then with relay.ErrUnavailable, rather than after the read
// timeout and every retry; once Redis resumes, the same calls succeed, and
// an arm repeated after such a failure leaves one armed row.
func TestStoppedRedisFailsCallsInTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := ctxFor(t, 30*time.Second)
	e, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: "outage"})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()
	at := time.Now().Add(time.Hour)
	arm := func(ctx context.Context, id string) (relay.ArmResult, error) {
		return e.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: "job", FireAt: at, ScheduleID: id})
	}
	if _, err := e.Stats(ctx); err != nil { // a connection in the pool
		t.Fatalf("stats: %v", err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatalf("pause: %v", err)
	}
	const bound = 300 * time.Millisecond
	bounded := relay.WithCallTimeout(ctx, bound)
	deadline, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for _, tc := range []struct {
		name string
		call func() error
		ctx  context.Context
	}{
		{"arm under a call timeout", func() error { _, err := arm(bounded, "s-1"); return err }, bounded},
		{"claim under a call timeout", func() error { _, err := e.Claim(bounded, 10, time.Minute, relay.Flow{}); return err }, bounded},
		{"next due under a call timeout", func() error { _, _, err := e.NextDue(bounded); return err }, bounded},
		{"get under a deadline", func() error { _, err := e.Get(deadline, "a1", "job"); return err }, deadline},
	} {
		start := time.Now()
		err := tc.call()
		took := time.Since(start)
		if !errors.Is(err, relay.ErrUnavailable) {
			t.Errorf("%s: error %v, want relay.ErrUnavailable", tc.name, err)
		}
		if took > bound+500*time.Millisecond {
			t.Errorf("%s: failed after %s, want about %s", tc.name, took, bound)
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	// The arm answered as failed may have been applied on resume; the
	// repeat is an upsert either way.
	res, err := arm(relay.WithCallTimeout(ctx, 5*time.Second), "s-2")
	if err != nil {
		t.Fatalf("arm after resume: %v", err)
	}
	items, _, err := e.List(ctx, "a1", "", 10)
	if err != nil || len(items) != 1 || items[0].ScheduleID != res.OneShot.ScheduleID {
		t.Fatalf("after resume list = %+v, %v; want one row, %s", items, err, res.OneShot.ScheduleID)
	}
}

// TestCallsWithoutBoundRideOutAShortPause: without a call timeout or deadline,
// a call still rides out a short outage by retrying (Options.RetryFor).
func TestCallsWithoutBoundRideOutAShortPause(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := ctxFor(t, 30*time.Second)
	e, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: "ride"})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()
	if err := srv.Pause(); err != nil {
		t.Fatalf("pause: %v", err)
	}
	resumed := make(chan error, 1)
	time.AfterFunc(500*time.Millisecond, func() { resumed <- srv.Resume() })
	if _, err := e.Stats(ctx); err != nil {
		t.Fatalf("stats across a short pause: %v", err)
	}
	if err := <-resumed; err != nil {
		t.Fatalf("resume: %v", err)
	}
}
