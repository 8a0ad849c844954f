package redis_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// quietLog discards logs.
var quietLog = slog.New(slog.DiscardHandler)

// waitSignal is a queue that signals each time its dispatcher has asked
// for the next due time and is about to wait for a wake-up.
type waitSignal struct {
	relay.Queue
	waiting chan struct{}
}

func (w *waitSignal) NextDue(ctx context.Context) (time.Duration, bool, error) {
	d, ok, err := w.Queue.NextDue(ctx)
	select {
	case w.waiting <- struct{}{}:
	default:
	}
	return d, ok, err
}

// TestWakeSurvivesADroppedSubscription drops the engine's Pub/Sub
// connection right after a fire became due earlier without an announcement
// reaching it (as one published while the connection was down would be
// lost): once the subscription is back, the dispatcher asks for the next due
// time again and delivers the fire at its time, not at its hourly recheck.
func TestWakeSurvivesADroppedSubscription(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{}) // CLIENT KILL must not touch other tests
	ctx := ctxFor(t, 30*time.Second)
	e, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: "wake", Shards: 1})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: "job", FireAt: time.Now().Add(time.Hour), ScheduleID: "s1"}); err != nil {
		t.Fatalf("arm: %v", err)
	}
	delivered := make(chan time.Time, 1)
	q := &waitSignal{Queue: e, waiting: make(chan struct{}, 1)}
	d := relay.NewDispatcher(q, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		delivered <- time.Now()
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Recheck: time.Hour, Logger: quietLog})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	select {
	case <-q.waiting:
	case <-ctx.Done():
		t.Fatal("the dispatcher never waited")
	}
	// Behind the engine's back: the fire is now due in 300ms, unannounced.
	c := redistest.ClientOf(t, srv.URL())
	due := time.UnixMilli(time.Now().Add(300 * time.Millisecond).UnixMilli()) // scores are whole ms
	if err := c.ZAddXX(ctx, "{chronos:wake:0}:due", goredis.Z{Score: float64(due.UnixMilli()), Member: strconv.Itoa(len("a1")) + ":a1job"}).Err(); err != nil {
		t.Fatalf("move the due entry: %v", err)
	}
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("drop the subscription: %v", err)
	}
	select {
	case at := <-delivered:
		if at.Before(due) || at.After(due.Add(2*time.Second)) {
			t.Fatalf("delivered %s after the due time, want at it", at.Sub(due))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fire was not delivered after the subscription came back")
	}
}
