package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/internal/backoff"
)

// Dispatcher claims due one-shots from a Queue and hands them to a
// Deliverer, then acks, retries or dead-letters each by its Outcome.
//
// It waits for the earliest due entry with a timer (re-armed by the queue's
// Wake and re-checked at least every Recheck), never on a polling tick. It
// claims in batches under the store's flow control (see Flow: per agent
// parallelism and rate, probing of agents that do not answer, the kill
// switch; a fire held back waits in the store, not here), delivers with
// bounded concurrency, and runs the reaper. Any number of dispatchers, in
// any number of processes, may share one engine.
type Dispatcher struct {
	q       Queue
	d       Deliverer
	cfg     DispatcherConfig
	running atomic.Bool
}

// NewDispatcher returns a dispatcher of q's fires to d. Invalid settings are
// reported by Run.
func NewDispatcher(q Queue, d Deliverer, cfg DispatcherConfig) *Dispatcher {
	return &Dispatcher{q: q, d: d, cfg: cfg.WithDefaults()}
}

// ErrDispatcherRunning is returned by Run when the dispatcher already runs.
var ErrDispatcherRunning = errors.New("relay: dispatcher already running")

// Run dispatches until ctx ends, then stops claiming, waits up to
// DrainTimeout for the deliveries in flight to settle, and returns nil. Engine errors are logged
// and retried with backoff; they do not end Run.
func (d *Dispatcher) Run(ctx context.Context) error {
	if err := d.cfg.validate(); err != nil {
		return fmt.Errorf("relay: dispatcher config: %w", err)
	}
	if !d.running.CompareAndSwap(false, true) {
		return ErrDispatcherRunning
	}
	defer d.running.Store(false)

	base := context.WithoutCancel(ctx)
	r := &run{
		Dispatcher: d,
		log:        d.cfg.Logger,
		ops:        base,
		work:       make(chan *tracked, d.cfg.Concurrency),
		wantFree:   1,
		freed:      make(chan struct{}, 1),
		kick:       make(chan struct{}, 1),
	}

	maintCtx, stopMaint := context.WithCancel(base)
	var maint sync.WaitGroup
	maint.Go(func() { r.maintain(maintCtx) })

	r.loop(ctx)
	r.drain()
	close(r.work) // every worker is parked: nothing is started any more
	r.workers.Wait()
	stopMaint()
	maint.Wait()
	return nil
}

// drain waits up to DrainTimeout for the deliveries in flight to settle,
// then cancels those still running and waits for them.
func (r *run) drain() {
	drained := make(chan struct{})
	go func() {
		r.deliveries.Wait()
		close(drained)
	}()
	timer := time.NewTimer(r.cfg.DrainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
		return
	case <-timer.C:
	}
	r.log.Warn("relay: drain timed out; cancelling deliveries in flight", "timeout", r.cfg.DrainTimeout.String())
	r.mu.Lock()
	for _, t := range r.leases {
		t.mu.Lock()
		cancel := t.cancel
		t.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
	r.mu.Unlock()
	<-drained
}

// tracked is a lease this dispatcher holds, being delivered.
type tracked struct {
	agent string // of the lease; never changes
	id    string // schedule id of the lease; never changes
	slot  int    // index in run.leases while held, else -1; under run.mu

	mu      sync.Mutex
	lease   Lease
	renewed time.Time          // when the lease was last taken or extended (local monotonic clock)
	ctx     context.Context    // of the delivery
	cancel  context.CancelFunc // of the delivery
}

// current returns the latest lease.
func (t *tracked) current() Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lease
}

// run is the state of one Run.
//
// Deliveries run on workers: goroutines started as deliveries need them, up
// to Concurrency, each running one delivery after another (its stack grows
// once, not per delivery) and parking on work in between, until Run ends.
type run struct {
	*Dispatcher
	log        *slog.Logger
	ops        context.Context // parent of engine calls and deliveries: outlives Run's ctx
	deliveries sync.WaitGroup  // deliveries started and not yet finished
	workers    sync.WaitGroup
	work       chan *tracked // started deliveries for parked workers; closed once drained

	mu       sync.Mutex
	inFlight int
	leases   []*tracked // every lease held
	idle     int        // workers parked on work and not yet handed a delivery
	wantFree int        // the room at which the loop is to be woken (see room)

	lastClaim time.Time // when the loop last claimed; only the loop uses it

	freed chan struct{} // the room the loop waits for was freed (see room)
	kick  chan struct{} // the reaper returned leases
}

// signal sends on a buffered-1 channel without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// op returns a context for one engine call.
func (r *run) op() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ops, r.cfg.OpTimeout)
}

// refillPause is how long after a claim a dispatcher with deliveries in
// flight waits before claiming less than a quarter of a batch.
const refillPause = 10 * time.Millisecond

// room is how many one-shots may be claimed now. While deliveries are in
// flight and the last claim is recent, it waits for a quarter of a batch to
// be free (deliveries finishing signal freed): during a backlog, refilling
// each freed slot with its own claim would cost a peek and a claim per fire,
// while slow deliveries still get a freed slot refilled within refillPause.
// Only the loop calls it; deferred > 0 says there is room that waits for
// that long at most. It sets wantFree to the room at which the loop, if it
// waits for room, is to be woken: a wake-up per freed slot would cost the
// loop a turn per fire during a backlog.
func (r *run) room() (n int, deferred time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wantFree = 1
	n = r.free()
	if refill := r.refillAt(); n > 0 && r.inFlight > 0 && n < refill {
		if since := time.Since(r.lastClaim); since < refillPause {
			r.wantFree = refill
			return 0, refillPause - since
		}
	}
	return n, 0
}

// free is how many one-shots the limits let the loop claim; the caller
// holds r.mu.
func (r *run) free() int {
	return max(0, min(r.cfg.Batch, r.cfg.Concurrency-r.inFlight))
}

// refillAt is the room a dispatcher with deliveries in flight waits for,
// within refillPause of its last claim: a quarter of a batch.
func (r *run) refillAt() int {
	return max(1, min(r.cfg.Batch, r.cfg.Concurrency)/4)
}

// freedRoom tells a loop waiting for room that the room it waits for is
// there, or that nothing is in flight any more; the caller holds r.mu.
func (r *run) freedRoom() {
	if n := r.free(); n >= r.wantFree || (n > 0 && r.inFlight == 0) {
		signal(r.freed)
	}
}

// storeErrorBackoff spaces a dispatcher's engine calls after consecutive
// failures: 50ms doubling to 5s, reset by a successful claim.
var storeErrorBackoff = backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}

// loop claims and dispatches until ctx ends.
func (r *run) loop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	// failed backs off after an engine error.
	failed := func(what string, err error) {
		failures++
		wait := storeErrorBackoff.Delay(failures)
		r.log.Error("relay: "+what+" failed", "err", err, "retry_in", wait.String())
		_ = backoff.Sleep(ctx, wait) // an ended ctx ends the loop
	}
	for ctx.Err() == nil {
		room, deferred := r.room()
		if room > 0 {
			octx, cancel := r.op()
			r.lastClaim = time.Now()
			leases, err := r.q.Claim(octx, room, r.cfg.LeaseFor, Flow{Parallelism: r.cfg.PerAgent, Rate: r.cfg.PerAgentRate})
			cancel()
			if ctx.Err() != nil {
				// Stopped while the claim ran: its fires go back to the
				// queue, due now, for another dispatcher, rather than out
				// in deliveries the stop would have to wait for.
				r.giveBack(leases)
				return
			}
			// A claim that failed part way still hands over the leases it
			// took: dropping them would leave those fires leased, undelivered,
			// for a whole lease and cost each an attempt.
			r.dispatch(leases)
			if err != nil {
				failed("claim", err)
				continue
			}
			failures = 0
			if len(leases) > 0 {
				// More may be due: a claim returns fewer than asked when
				// flow control held some of its candidates back, and asking
				// for the next due time would only answer "now".
				continue
			}
		}
		wait := r.cfg.Recheck
		var wake, freed <-chan struct{}
		if room > 0 {
			// The wake-up first: an entry made due earlier after NextDue
			// answered then closes it.
			wake = r.q.Wake()
			octx, cancel := r.op()
			next, ok, err := r.q.NextDue(octx)
			cancel()
			if err != nil {
				failed("next due", err)
				continue
			}
			if ok {
				wait = min(wait, next)
			}
		} else {
			freed = r.freed // full: wait for a slot, not for new fires
			if deferred > 0 {
				wait = deferred
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-wake:
		case <-freed:
		case <-r.kick:
		}
	}
}

// giveBack returns leases a stopping dispatcher will not deliver to the
// queue, due now; a lease it cannot return lapses and is reaped.
func (r *run) giveBack(leases []Lease) {
	for _, l := range leases {
		octx, cancel := r.op()
		if err := r.q.Nack(octx, l, 0, "the dispatcher stopped before delivering it"); err != nil && !errors.Is(err, ErrLeaseLost) {
			r.log.Warn("relay: a claimed fire was not returned at shutdown; it is reaped when its lease expires",
				"agent_id", l.AgentID, "job_id", l.JobID, "err", err)
		}
		cancel()
	}
}

// dispatch starts a delivery of each lease.
func (r *run) dispatch(leases []Lease) {
	if len(leases) == 0 {
		return
	}
	now := r.cfg.Now()
	for i := range leases {
		if leases[i].Attempt == 1 {
			r.cfg.Metrics.ObserveFireLag(now.Sub(leases[i].FireAt))
		}
	}
	renewed := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range leases {
		l := &leases[i]
		t := &tracked{agent: l.AgentID, id: l.ScheduleID, lease: *l, renewed: renewed}
		r.track(t)
		r.inFlight++
		r.start(t)
	}
}

// track adds t to the leases held; the caller holds r.mu.
func (r *run) track(t *tracked) {
	t.slot = len(r.leases)
	r.leases = append(r.leases, t)
}

// untrack removes t from the leases held; the caller holds r.mu.
func (r *run) untrack(t *tracked) {
	i := t.slot
	if i < 0 || i >= len(r.leases) || r.leases[i] != t {
		return
	}
	last := len(r.leases) - 1
	r.leases[i] = r.leases[last]
	r.leases[i].slot = i
	r.leases[last] = nil
	r.leases = r.leases[:last]
	t.slot = -1
}

// start runs one delivery on a parked worker, or on a new one; the caller
// holds r.mu and has counted it in inFlight. Workers number at most
// inFlight (at most Concurrency), so work has room for every delivery handed
// over; should an engine ever claim more than asked, the delivery gets a
// worker of its own rather than blocking here.
func (r *run) start(t *tracked) {
	r.begin(t)
	if r.idle > 0 {
		select {
		case r.work <- t:
			r.idle--
			return
		default:
		}
	}
	r.workers.Go(func() { r.serve(t) })
}

// begin accounts for a delivery of t about to start and gives it its own
// context, which a lost lease or a drain that timed out cancels; the caller
// holds r.mu. Deliveries' contexts derive from ops, which is never
// cancelled, so that making one registers nothing with a parent.
func (r *run) begin(t *tracked) {
	ctx, cancel := context.WithCancel(r.ops)
	t.mu.Lock()
	t.ctx, t.cancel = ctx, cancel
	t.mu.Unlock()
	r.deliveries.Add(1)
}

// serve is a worker: it runs t, then whatever delivery it is handed next,
// until work is closed.
func (r *run) serve(t *tracked) {
	w := worker{run: r}
	defer w.close()
	for {
		w.handle(t)
		var ok bool
		if t, ok = <-r.work; !ok {
			return
		}
	}
}
