package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqProfile is one way of configuring asynq's server.
type asynqProfile struct {
	system string
	config asynq.Config
}

// The two profiles compared: asynq as tuned for a low-lag burst, and as it
// comes. Queues and LogLevel are set on both, to serve the run's own queue
// and keep the output to errors.
var (
	asynqTuned = asynqProfile{system: systemAsynqTuned, config: asynq.Config{
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        50 * time.Millisecond,
		Concurrency:              100,
	}}
	asynqDefault = asynqProfile{system: systemAsynqDefault}
)

// asynqTaskType names the benchmark's tasks.
const asynqTaskType = "peerbench:noop"

// asynqRun is one burst through asynq's scheduler: n tasks enqueued with
// ProcessAt at one instant, a server with a no-op handler that notes when
// each task reached it.
type asynqRun struct {
	profile        asynqProfile
	redisURL       string
	n              int
	at             time.Duration
	enqueueWorkers int
	timeout        time.Duration
}

// run performs the burst and removes its queue's keys after.
func (a asynqRun) run(ctx context.Context, admin *redis.Client) (*Result, error) {
	conn, err := asynq.ParseRedisURI(a.redisURL)
	if err != nil {
		return nil, fmt.Errorf("asynq: %w", err)
	}
	// A fresh queue per run: nothing left from an earlier run is served.
	queue := fmt.Sprintf("peerbench-%s-%d", a.profile.system, time.Now().UnixNano())
	defer a.cleanup(admin, queue)

	rec := newHandlerLog(a.n)
	cfg := a.profile.config
	cfg.Queues = map[string]int{queue: 1}
	cfg.LogLevel = asynq.ErrorLevel
	srv := asynq.NewServer(conn, cfg)
	if err := srv.Start(asynq.HandlerFunc(rec.handle)); err != nil {
		return nil, fmt.Errorf("asynq: start server: %w", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Shutdown()
		}
	}
	defer stop()

	client := asynq.NewClient(conn)
	defer client.Close()
	start := time.Now()
	// asynq keeps a scheduled task's time in whole seconds and forwards it
	// once that second has begun: the due time is put on a whole second, so
	// no task can be forwarded before it.
	due := start.Add(a.at).Truncate(time.Second).Add(time.Second)
	rec.due = due
	if err := a.enqueue(ctx, client, queue, due); err != nil {
		return nil, err
	}
	enqueued := time.Now()
	res := &Result{System: a.profile.system, Fires: a.n,
		EnqueueSeconds: enqueued.Sub(start).Seconds(), EnqueuedLate: enqueued.After(due)}

	cpu0 := processCPU()
	rcpu0, rerr := redisCPU(ctx, admin)
	wctx, cancel := context.WithTimeout(ctx, a.timeout)
	var waitErr error
	select {
	case <-rec.done:
	case <-wctx.Done():
		waitErr = fmt.Errorf("asynq: waiting for tasks: %w", wctx.Err())
	}
	cancel()
	cpu := processCPU() - cpu0
	rcpu1, rerr1 := redisCPU(ctx, admin)
	// The server's workers are done once it has shut down: only then are
	// the handler's notes read.
	stop()

	lags, last, dups := rec.results()
	res.Handled = len(lags)
	res.Lost = a.n - len(lags)
	res.Duplicates = dups
	if len(lags) > 0 {
		res.CPUPerFireUs = cpu.Seconds() * 1e6 / float64(len(lags))
		slices.Sort(lags)
		res.LagP50Ms = ms(percentile(lags, 0.50))
		res.LagP99Ms = ms(percentile(lags, 0.99))
		res.LagMaxMs = ms(lags[len(lags)-1])
		from := due
		if enqueued.After(from) {
			from = enqueued
		}
		res.DrainSeconds = last.Sub(from).Seconds()
		if res.DrainSeconds > 0 {
			res.DrainRate = float64(len(lags)) / res.DrainSeconds
		}
	}
	if rerr == nil && rerr1 == nil {
		res.RedisCPUFireUs = (rcpu1 - rcpu0) * 1e6 / float64(a.n)
	}
	if waitErr != nil {
		return res, fmt.Errorf("%w (%d of %d handled within %s)", waitErr, len(lags), a.n, a.timeout)
	}
	return res, nil
}

// enqueue schedules the n tasks at due from several goroutines, as many
// producers would; each task's payload is its index.
func (a asynqRun) enqueue(ctx context.Context, client *asynq.Client, queue string, due time.Time) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, a.enqueueWorkers)
	for range a.enqueueWorkers {
		wg.Go(func() {
			payload := make([]byte, 8)
			for {
				i := next.Add(1) - 1
				if i >= int64(a.n) {
					return
				}
				binary.BigEndian.PutUint64(payload, uint64(i))
				task := asynq.NewTask(asynqTaskType, slices.Clone(payload))
				if _, err := client.EnqueueContext(ctx, task, asynq.Queue(queue), asynq.ProcessAt(due)); err != nil {
					errs <- fmt.Errorf("asynq: enqueue task %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cleanup removes the run's queue: its keys and its name in the set of
// queues. asynq removes its server's own keys when the server shuts down.
func (a asynqRun) cleanup(admin *redis.Client, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = unlinkMatching(ctx, admin, "asynq:{"+queue+"}:*")
	_ = admin.SRem(ctx, "asynq:queues", queue).Err()
}

// handlerLog notes, for each task, when it reached the handler.
type handlerLog struct {
	due   time.Time
	seen  []atomic.Bool
	lags  []time.Duration
	count atomic.Int64
	dups  atomic.Int64
	last  atomic.Int64 // unix nanoseconds of the latest first arrival
	done  chan struct{}
}

func newHandlerLog(n int) *handlerLog {
	return &handlerLog{seen: make([]atomic.Bool, n), lags: make([]time.Duration, n), done: make(chan struct{})}
}

// handle is the no-op handler: it notes the task's arrival and returns.
func (h *handlerLog) handle(_ context.Context, t *asynq.Task) error {
	now := time.Now()
	p := t.Payload()
	if len(p) != 8 {
		return fmt.Errorf("peerbench: payload of %d bytes", len(p))
	}
	id := binary.BigEndian.Uint64(p)
	if id >= uint64(len(h.seen)) || h.seen[id].Swap(true) {
		h.dups.Add(1)
		return nil
	}
	i := h.count.Add(1)
	h.lags[i-1] = now.Sub(h.due)
	for {
		old := h.last.Load()
		if now.UnixNano() <= old || h.last.CompareAndSwap(old, now.UnixNano()) {
			break
		}
	}
	if int(i) == len(h.lags) {
		close(h.done)
	}
	return nil
}

// results are the lags noted (unsorted), the latest arrival and the count of
// duplicates. Call it only once no handler runs.
func (h *handlerLog) results() ([]time.Duration, time.Time, int) {
	n := h.count.Load()
	return slices.Clone(h.lags[:n]), time.Unix(0, h.last.Load()), int(h.dups.Load())
}

// processCPU is this process's CPU time so far (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
