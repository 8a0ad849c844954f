package relay_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// stalledClaim is a Queue whose first claim waits, once it has begun, until
// released: a claim still running when its dispatcher is stopped.
type stalledClaim struct {
	relay.Queue
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

func (q *stalledClaim) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	if q.calls.Add(1) == 1 {
		close(q.entered)
		<-q.release
	}
	return q.Queue.Claim(ctx, max, leaseFor, flow)
}

// TestStoppedDispatcherGivesBackWhatItsLastClaimTook: a claim that ends
// after its dispatcher was stopped hands its fires back to the queue, due
// now, with a reason, instead of delivering them.
func TestStoppedDispatcherGivesBackWhatItsLastClaimTook(t *testing.T) {
	t.Parallel()
	e := armBurst(t, 3, 1)
	q := &stalledClaim{Queue: e, entered: make(chan struct{}), release: make(chan struct{})}
	var delivered atomic.Int32
	d := relay.NewDispatcher(q, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		delivered.Add(1)
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	<-q.entered
	cancel()
	close(q.release)
	if err := <-ran; err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := delivered.Load(); n != 0 {
		t.Fatalf("%d deliveries after the stop, want none", n)
	}
	s, err := e.Stats(context.Background())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if s.Leased != 0 || s.Armed != 3 {
		t.Fatalf("after the stop %+v: want the 3 fires armed again, none leased", s)
	}
	// The stop may also cut the claim short (its context is the stopping
	// dispatcher's): then the fires were never leased at all.
	for _, job := range []string{"job000", "job001", "job002"} {
		o, err := e.Get(context.Background(), "agent0", job)
		if err != nil {
			t.Fatalf("get %s: %v", job, err)
		}
		givenBack := o.Attempt == 1 && strings.Contains(o.LastError, "stopped") && !o.DueAt.After(time.Now())
		if o.State != relay.StateArmed || !(givenBack || o.Attempt == 0) {
			t.Errorf("%s after the stop: state %s, attempt %d, last error %q, due %s; want armed, and either never claimed or given back due now saying the dispatcher stopped",
				job, o.State, o.Attempt, o.LastError, o.DueAt)
		}
	}
}
