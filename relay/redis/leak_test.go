package redis_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// TestCloseLeavesNoGoroutines uses every part of the engine that starts a
// goroutine (the wake subscription, group-committed acks) and wants none
// left after Close. It is not parallel, so other tests' goroutines are not
// running yet.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	url := redistest.URL(t) // the shared server outlives this test
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := redis.Open(ctx, url, redis.Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	w := e.Wake()
	for i := range 20 {
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: string(rune('a' + i)), FireAt: time.Now().Add(-time.Second), ScheduleID: string(rune('A' + i))}); err != nil {
			t.Fatalf("arm: %v", err)
		}
	}
	<-w
	ls, err := e.Claim(ctx, 20, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 20 {
		t.Fatalf("claim: %d, %v", len(ls), err)
	}
	done := make(chan error, len(ls))
	for _, l := range ls {
		go func() { done <- e.Ack(ctx, l) }()
	}
	for range ls {
		if err := <-done; err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}
