package relay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// burstQueue is a Queue holding n fires all due now, spread over agents,
// whose calls cost next to nothing: a benchmark on it measures the
// dispatcher alone. Its fires cycle through a few thousand distinct leases,
// so that the heap stays the size of a real burst's. Acks are counted; all
// is closed at the last one.
type burstQueue struct {
	mu    sync.Mutex
	pool  []relay.Lease
	left  int // fires not yet claimed
	acked atomic.Int64
	n     int64
	all   chan struct{}
	never chan struct{}
}

func newBurstQueue(n, agents int) *burstQueue {
	q := &burstQueue{left: n, n: int64(n), all: make(chan struct{}), never: make(chan struct{})}
	at := time.Now()
	q.pool = make([]relay.Lease, min(n, 4096))
	for i := range q.pool {
		q.pool[i] = relay.Lease{OneShot: relay.OneShot{
			ScheduleID: fmt.Sprintf("sch%06d", i), AgentID: fmt.Sprintf("agent%03d", i%agents),
			JobID: fmt.Sprintf("job%06d", i), FireAt: at, DueAt: at, Attempt: 1, State: relay.StateLeased,
		}, Token: 1}
	}
	return q
}

// Claim hands out a fresh slice, as an engine does.
func (q *burstQueue) Claim(_ context.Context, max int, _ time.Duration, _ relay.Flow) ([]relay.Lease, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(max, q.left)
	out := make([]relay.Lease, n)
	for i := range out {
		out[i] = q.pool[(q.left-i)%len(q.pool)]
	}
	q.left -= n
	return out, nil
}

func (q *burstQueue) NextDue(context.Context) (time.Duration, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return 0, q.left > 0, nil
}

func (q *burstQueue) Wake() <-chan struct{} { return q.never }

func (q *burstQueue) Extend(_ context.Context, l relay.Lease, _ time.Duration) (relay.Lease, error) {
	return l, nil
}

func (q *burstQueue) Ack(context.Context, relay.Lease) error {
	if q.acked.Add(1) == q.n {
		close(q.all)
	}
	return nil
}

func (q *burstQueue) Nack(context.Context, relay.Lease, time.Duration, string) error {
	return fmt.Errorf("unexpected nack")
}

func (q *burstQueue) Down(context.Context, relay.Lease, time.Duration, time.Duration, string) error {
	return fmt.Errorf("unexpected down")
}

func (q *burstQueue) Kill(context.Context, relay.Lease, string) error {
	return fmt.Errorf("unexpected kill")
}

func (q *burstQueue) Reap(context.Context) (int, error) { return 0, nil }

// deepStack uses about depth KiB of stack, as a real delivery does (token
// signing, an HTTP client): a goroutine started small grows its stack on
// the way down.
//
//go:noinline
func deepStack(depth int) byte {
	var pad [1024]byte
	pad[depth%len(pad)] = byte(depth)
	if depth == 0 {
		return pad[0]
	}
	return deepStack(depth-1) + pad[depth%len(pad)]
}

// BenchmarkDispatcher runs b.N fires, due at once over 200 agents, through
// one dispatcher with the default settings on a queue whose calls cost
// nothing, to a Deliverer that does nothing ("trivial") or that goes about
// 24 KiB deep ("deep"): ns/op and allocs/op are the dispatcher's own cost
// per fire.
func BenchmarkDispatcher(b *testing.B) {
	for _, bc := range []struct {
		name  string
		depth int
	}{{"trivial", -1}, {"deep", 24}} {
		b.Run(bc.name, func(b *testing.B) {
			q := newBurstQueue(b.N, 200)
			d := relay.NewDispatcher(q, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
				if bc.depth >= 0 {
					deepStack(bc.depth)
				}
				return relay.Outcome{Kind: relay.Done}
			}), relay.DispatcherConfig{Logger: quiet})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU(b)
			go func() { done <- d.Run(ctx) }()
			<-q.all
			cancel()
			if err := <-done; err != nil {
				b.Fatalf("run: %v", err)
			}
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU returns the CPU time the process has used (user and system):
// on a shared machine it is a steadier measure than the wall clock.
func processCPU(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
