package relaytest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// failingClaims is a Queue whose next claim that takes leases also reports
// an error, as a claim that failed part way does.
type failingClaims struct {
	relay.Queue
	armed atomic.Bool
}

func (q *failingClaims) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	ls, err := q.Queue.Claim(ctx, max, leaseFor, flow)
	if err == nil && len(ls) > 0 && q.armed.CompareAndSwap(true, false) {
		err = errors.New("claim failed part way")
	}
	return ls, err
}

func testDispatchKeepsLeasesOfAFailedClaim(t *testing.T, e relay.Engine) {
	q := &failingClaims{Queue: e}
	q.armed.Store(true)
	// A lease of a minute: a dropped lease would come back only after it.
	b := startDispatchers(t, e, dispatchOptions{queue: q, answer: always(Delivered), cfg: relay.DispatcherConfig{LeaseFor: time.Minute}})
	armAt(t, e, "a1", "job", time.Now())
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	drained(t, e)
	b.stop()
	if q.armed.Load() {
		t.Fatal("the failing claim never happened")
	}
	equal(t, c.Req.Attempt, 1, "attempt of the delivery")
}

// brokenClaims is a Queue whose first fail claims fail with nothing taken,
// as a store that is down does; it records when each claim came.
type brokenClaims struct {
	relay.Queue
	fail int

	mu sync.Mutex
	at []time.Time
}

func (q *brokenClaims) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	q.mu.Lock()
	q.at = append(q.at, time.Now())
	n := len(q.at)
	q.mu.Unlock()
	if n <= q.fail {
		return nil, errors.New("store down")
	}
	return q.Queue.Claim(ctx, max, leaseFor, flow)
}

// testDispatchBacksOffAfterStoreErrors: claims that fail are repeated on
// the dispatcher's store-error schedule (50ms doubling), not in a tight
// loop, and the fire due meanwhile is delivered, on its first attempt, once
// the store answers again.
func testDispatchBacksOffAfterStoreErrors(t *testing.T, e relay.Engine) {
	q := &brokenClaims{Queue: e, fail: 4}
	armAt(t, e, "a1", "job", time.Now())
	b := startDispatchers(t, e, dispatchOptions{queue: q, answer: always(Delivered)})
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	drained(t, e)
	b.stop()
	equal(t, c.Req.Attempt, 1, "attempt of the delivery")
	q.mu.Lock()
	at := slices.Clone(q.at)
	q.mu.Unlock()
	if len(at) < 5 {
		t.Fatalf("%d claims, want the 4 that failed and one that took the fire", len(at))
	}
	for i, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < want {
			t.Errorf("claim %d came %s after failed claim %d, want at least %s", i+2, gap, i+1, want)
		}
	}
}

func testDispatchRunTwice(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	block := make(chan struct{})
	d := relay.NewDispatcher(e, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		<-block
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Logger: quiet})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- d.Run(runCtx) }()
	armAt(t, e, "a", "j", time.Now())
	eventually(t, 5*time.Second, "claim", func() bool {
		s, err := e.Stats(ctx)
		return err == nil && s.Leased == 1
	})
	isErr(t, d.Run(runCtx), relay.ErrDispatcherRunning, "second Run")
	cancel()
	close(block)
	noErr(t, <-done, "run")
	bad := relay.NewDispatcher(e, relay.DelivererFunc(nil), relay.DispatcherConfig{Batch: -1})
	if err := bad.Run(ctx); err == nil || !strings.Contains(err.Error(), "Batch") {
		t.Fatalf("run with a bad config = %v", err)
	}
}

func testDispatchSurvivesPanickingDeliverer(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	var calls atomic.Int64
	d := relay.NewDispatcher(e, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Logger: quiet, Retry: relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	armAt(t, e, "a", "j", time.Now())
	drained(t, e)
	cancel()
	noErr(t, <-done, "run")
	equal(t, calls.Load(), 2, "deliveries")
}
