package relay_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/chronoscron/chronos/relay"
)

// lostAcks is a Queue whose acks find the lease lost, as when the agent
// armed its next slot while answering (the row was replaced).
type lostAcks struct {
	relay.Queue
	mu  sync.Mutex
	n   int
	all chan struct{}
}

func (q *lostAcks) Ack(ctx context.Context, l relay.Lease) error {
	_ = q.Queue.Ack(ctx, l)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n--; q.n == 0 {
		close(q.all)
	}
	return relay.ErrLeaseLost
}

// syncBuffer is a bytes.Buffer safe for the dispatcher's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLeaseLostAfterDeliveryIsDebug: a delivered fire whose ack finds the
// lease lost (the usual course when the agent re-arms as it answers) logs
// nothing at info; at debug it is still told.
func TestLeaseLostAfterDeliveryIsDebug(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			const fires = 20
			q := &lostAcks{Queue: armBurst(t, fires, 4), n: fires, all: make(chan struct{})}
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))
			d := relay.NewDispatcher(q, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
				return relay.Outcome{Kind: relay.Done}
			}), relay.DispatcherConfig{Concurrency: 4, Logger: log})
			runUntil(t, d, q.all)
			n := strings.Count(logs.String(), "lease lost before the outcome was recorded")
			if level == slog.LevelInfo && n != 0 {
				t.Fatalf("%d lines at info for leases lost after a delivery, want none:\n%s", n, logs.String())
			}
			if level == slog.LevelDebug && n == 0 {
				t.Fatalf("no debug line for the leases lost after a delivery:\n%s", logs.String())
			}
		})
	}
}
