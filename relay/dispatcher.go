package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/internal/backoff"
)

// DispatcherConfig configures a Dispatcher. A zero field takes its default
// (see WithDefaults).
type DispatcherConfig struct {
	// Batch is the most one-shots claimed in one call. Default 64.
	Batch int
	// Concurrency bounds the deliveries in flight. Default 64.
	Concurrency int
	// PerAgent bounds the deliveries in flight to one agent, over every
	// process sharing the store (relay.per_agent.parallelism); an agent's
	// own AgentPolicy overrides it. Default 4.
	PerAgent int
	// PerAgentRate bounds the deliveries per second to one agent
	// (relay.per_agent.rate); 0 leaves it unbounded. Default 0.
	PerAgentRate float64
	// MisfireGrace is how late after its fire_at a fire may still be
	// delivered; a fire claimed later (an agent disabled for long, a store
	// that was down) is dead-lettered instead, so its agent learns of it as
	// a failed fire. Default Retry.MaxAge.
	MisfireGrace time.Duration
	// LeaseFor is the lease taken on each claim. Leases of slow deliveries
	// and of waiting fires are extended before they lapse; the reaper runs
	// every LeaseFor/2. Default 30s.
	LeaseFor time.Duration
	// Retry is the backoff and give-up policy.
	Retry RetryPolicy
	// Recheck is the longest the dispatcher waits without asking the engine
	// for the next due time, a safety net for a lost wake-up. Default 30s.
	Recheck time.Duration
	// DrainTimeout bounds how long Run waits for deliveries in flight once
	// its context ends; then their contexts are cancelled. Default 30s.
	DrainTimeout time.Duration
	// OpTimeout bounds each engine call. Default 5s. (A burst's acks share
	// their contexts: each call still gets at most OpTimeout, and at least
	// 98% of it.)
	OpTimeout time.Duration
	// Logger receives the dispatcher's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives counts and observations. Default NopMetrics.
	Metrics Metrics
	// Now is the clock for fire lag and retry age. Default time.Now.
	Now func() time.Time
	// Rand returns a uniform number in [0, n) for jitter. Default
	// math/rand/v2.Int64N.
	Rand func(n int64) int64
}

// WithDefaults returns c with every zero field set to its default.
func (c DispatcherConfig) WithDefaults() DispatcherConfig {
	if c.Batch == 0 {
		c.Batch = 64
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.PerAgent == 0 {
		c.PerAgent = 4
	}
	if c.LeaseFor == 0 {
		c.LeaseFor = 30 * time.Second
	}
	c.Retry = c.Retry.WithDefaults()
	if c.MisfireGrace == 0 {
		c.MisfireGrace = c.Retry.MaxAge
	}
	if c.Recheck == 0 {
		c.Recheck = 30 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = NopMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Int64N
	}
	return c
}

// validate reports the first field out of range, by name.
func (c DispatcherConfig) validate() error {
	switch {
	case c.Batch < 1:
		return fmt.Errorf("DispatcherConfig.Batch %d must be at least 1", c.Batch)
	case c.Concurrency < 1:
		return fmt.Errorf("DispatcherConfig.Concurrency %d must be at least 1", c.Concurrency)
	case c.PerAgent < 1:
		return fmt.Errorf("DispatcherConfig.PerAgent %d must be at least 1", c.PerAgent)
	case c.PerAgentRate < 0:
		return fmt.Errorf("DispatcherConfig.PerAgentRate %v must not be negative", c.PerAgentRate)
	case c.MisfireGrace < 0:
		return fmt.Errorf("DispatcherConfig.MisfireGrace %s must not be negative", c.MisfireGrace)
	case c.LeaseFor < 4*time.Millisecond:
		return fmt.Errorf("DispatcherConfig.LeaseFor %s must be at least 4ms", c.LeaseFor)
	case c.Recheck <= 0:
		return fmt.Errorf("DispatcherConfig.Recheck %s must be positive", c.Recheck)
	case c.DrainTimeout <= 0:
		return fmt.Errorf("DispatcherConfig.DrainTimeout %s must be positive", c.DrainTimeout)
	case c.OpTimeout <= 0:
		return fmt.Errorf("DispatcherConfig.OpTimeout %s must be positive", c.OpTimeout)
	}
	return c.Retry.validate()
}

// Metrics receives what a dispatcher observes. Implementations must be safe
// for concurrent use.
type Metrics interface {
	// ObserveFireLag records how long after fire_at a fire's first delivery
	// attempt started.
	ObserveFireLag(lag time.Duration)
	// CountOutcome counts one delivery attempt by the deliverer's verdict.
	CountOutcome(kind OutcomeKind)
	// CountRetry counts a retry scheduled on ladder.
	CountRetry(ladder Ladder)
	// CountDeadLetter counts a fire moved to the dead letter.
	CountDeadLetter()
}

// NopMetrics discards everything.
type NopMetrics struct{}

// ObserveFireLag implements Metrics.
func (NopMetrics) ObserveFireLag(time.Duration) {}

// CountOutcome implements Metrics.
func (NopMetrics) CountOutcome(OutcomeKind) {}

// CountRetry implements Metrics.
func (NopMetrics) CountRetry(Ladder) {}

// CountDeadLetter implements Metrics.
func (NopMetrics) CountDeadLetter() {}

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

// worker is the state of one worker goroutine.
type worker struct {
	*run
	// op is the context this worker hands to its settles' engine calls
	// until reuseUntil: a fresh context and timer per fire would cost more
	// than the ack itself in a burst.
	op         context.Context
	stopOp     context.CancelFunc
	reuseUntil time.Time
}

// opReuse is the share of OpTimeout during which a worker reuses one
// engine-call context: each call still gets at most OpTimeout, and at least
// OpTimeout less OpTimeout/opReuse.
const opReuse = 50

// opCtx returns a context for one engine call of a settle.
func (w *worker) opCtx() context.Context {
	now := time.Now()
	if w.stopOp != nil && now.Before(w.reuseUntil) {
		return w.op
	}
	w.close()
	w.op, w.stopOp = context.WithDeadline(w.ops, now.Add(w.cfg.OpTimeout))
	w.reuseUntil = now.Add(w.cfg.OpTimeout / opReuse)
	return w.op
}

// close releases the worker's engine-call context.
func (w *worker) close() {
	if w.stopOp != nil {
		w.stopOp()
		w.stopOp = nil
	}
}

// handle delivers t and settles its outcome, then accounts for it.
func (w *worker) handle(t *tracked) {
	t.mu.Lock()
	ctx, cancel, l := t.ctx, t.cancel, t.lease
	t.mu.Unlock()
	returned := false
	defer func() {
		if !returned {
			w.exited(t)
		}
	}()
	out := w.deliverOrMiss(ctx, l)
	returned = true
	w.settle(w.opCtx(), t.current(), out)
	cancel()
	w.finish(t)
	w.deliveries.Done()
}

// exited settles and accounts for a delivery whose Deliverer ended its
// goroutine (runtime.Goexit) instead of returning, as for a panic: the fire
// is retried, and this worker, which ends with the delivery, is not counted
// idle.
func (w *worker) exited(t *tracked) {
	w.log.Error("relay: deliverer exited its goroutine", "schedule_id", t.id)
	w.settle(w.opCtx(), t.current(), Outcome{Kind: Retry, Reason: "deliverer exited without a verdict"})
	t.mu.Lock()
	cancel := t.cancel
	t.mu.Unlock()
	cancel()
	w.mu.Lock()
	w.release(t)
	w.mu.Unlock()
	w.deliveries.Done()
}

// deliver calls the Deliverer, turning a panic into a retry so that a
// faulty delivery neither kills the process nor loses the fire.
func (r *run) deliver(ctx context.Context, l Lease) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("relay: deliverer panicked", "schedule_id", l.ScheduleID, "panic", p)
			out = Outcome{Kind: Retry, Reason: fmt.Sprintf("deliverer panicked: %v", p)}
		}
	}()
	return r.d.Deliver(ctx, l)
}

// finish accounts for a finished delivery; the worker is counted idle, to
// park on work.
func (r *run) finish(t *tracked) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.release(t)
	r.idle++
}

// release accounts for a finished delivery; the caller holds r.mu.
func (r *run) release(t *tracked) {
	r.untrack(t)
	r.inFlight--
	r.freedRoom()
}

// deliverOrMiss delivers l, unless it is past its misfire grace: then it
// is dead-lettered without a call, and its agent learns of it as a failed
// fire.
func (r *run) deliverOrMiss(ctx context.Context, l Lease) Outcome {
	if late := r.cfg.Now().Sub(l.FireAt); late > r.cfg.MisfireGrace {
		return Outcome{Kind: Dead, Reason: fmt.Sprintf("missed its misfire grace: claimed %s after fire_at (grace %s)",
			late.Round(time.Second), r.cfg.MisfireGrace)}
	}
	return r.deliver(ctx, l)
}

// settle acts on an outcome: ack, nack or kill, with engine calls under ctx.
func (r *run) settle(ctx context.Context, l Lease, out Outcome) {
	r.cfg.Metrics.CountOutcome(out.Kind)
	var err error
	switch out.Kind {
	case Done:
		err = r.ack(ctx, l, out.Record)
		if err == nil {
			r.logFire(ctx, slog.LevelDebug, "relay: fire done", l, "reason", out.Reason)
		}
	case Dead:
		err = r.q.Kill(ctx, l, out.Reason)
		if err == nil {
			r.cfg.Metrics.CountDeadLetter()
			r.logFire(ctx, slog.LevelWarn, "relay: fire dead-lettered", l, "reason", out.Reason)
			r.recordDead(ctx, l, out.Reason)
		}
	default:
		if out.Kind != Retry {
			out.Reason = fmt.Sprintf("deliverer returned no verdict (%s)", out.Reason)
		}
		delay, ok := r.cfg.Retry.Next(l, out, r.cfg.Now(), r.cfg.Rand)
		if !ok {
			reason := fmt.Sprintf("gave up after %d attempts: %s", l.Attempt, out.Reason)
			err = r.q.Kill(ctx, l, reason)
			if err == nil {
				r.cfg.Metrics.CountDeadLetter()
				r.logFire(ctx, slog.LevelWarn, "relay: fire dead-lettered", l, "reason", reason)
				r.recordDead(ctx, l, reason)
			}
			break
		}
		if out.AgentDown {
			hold := r.cfg.Retry.Hold(l.AgentFailures+1, out, r.cfg.Rand)
			delay = max(delay, hold)
			err = r.q.Down(ctx, l, delay, hold, out.Reason)
		} else {
			err = r.q.Nack(ctx, l, delay, out.Reason)
		}
		if err == nil {
			r.cfg.Metrics.CountRetry(ladderOf(out))
			r.logFire(ctx, slog.LevelInfo, "relay: fire will be retried", l,
				"reason", out.Reason, "retry_in", delay.String(), "cold_start", out.ColdStart, "agent_down", out.AgentDown)
		}
	}
	switch {
	case errors.Is(err, ErrLeaseLost):
		// Cancelled, re-armed or reclaimed meanwhile: the fire is no longer
		// ours. After a delivery that is the usual course (the agent arms
		// its next slot as it answers, replacing the row), so it is debug;
		// a retry or dead letter lost this way is worth a line.
		level := slog.LevelInfo
		if out.Kind == Done {
			level = slog.LevelDebug
		}
		r.logFire(ctx, level, "relay: lease lost before the outcome was recorded", l, "outcome", out.Kind.String())
	case err != nil:
		// The lease will lapse and the reaper hand the fire out again.
		r.logFire(ctx, slog.LevelError, "relay: recording the outcome failed", l, "outcome", out.Kind.String(), "err", err)
	}
}

// ack acks a delivered fire and writes its last-fire record, if any: with
// the ack on an AckRecorder, else just before it (a failure to record is
// logged; the fire was delivered all the same).
func (r *run) ack(ctx context.Context, l Lease, rec *LastFire) error {
	if rec == nil {
		return r.q.Ack(ctx, l)
	}
	if ar, ok := r.q.(AckRecorder); ok {
		return ar.AckRecord(ctx, l, *rec)
	}
	if lf, ok := r.q.(LastFires); ok {
		if err := lf.RecordLastFire(ctx, *rec); err != nil {
			r.logFire(ctx, slog.LevelError, "relay: recording the fire as the job's last fire failed", l, "err", err)
		}
	} else {
		r.logFire(ctx, slog.LevelWarn, "relay: the queue keeps no last fires; the job's last fire is not recorded", l)
	}
	return r.q.Ack(ctx, l)
}

// recordDead records a dead-lettered fire as its job's last fire when the
// queue keeps last fires (relay.LastFires): NAS then reports the job as
// unarmed if its agent does not arm it again, and tells the agent why the
// slot never ran. A failure is logged: the dead letter itself holds the fire.
func (r *run) recordDead(ctx context.Context, l Lease, reason string) {
	lf, ok := r.q.(LastFires)
	if !ok {
		return
	}
	err := lf.RecordLastFire(ctx, LastFire{
		AgentID: l.AgentID, InstanceID: l.InstanceID, JobID: l.JobID, ScheduleID: l.ScheduleID,
		FireAt: l.FireAt, CallbackURL: l.CallbackURL, Outcome: LastFireDeadLettered, Reason: reason, At: r.cfg.Now(),
	})
	if err != nil {
		r.logFire(ctx, slog.LevelError, "relay: recording the dead-lettered fire as the job's last fire failed", l, "err", err)
	}
}

// logFire logs msg about l with the stable keys of a fire, building the
// record only when the level is enabled.
func (r *run) logFire(ctx context.Context, level slog.Level, msg string, l Lease, args ...any) {
	if !r.log.Enabled(ctx, level) {
		return
	}
	r.log.Log(ctx, level, msg, append([]any{"agent_id", l.AgentID, "job_id", l.JobID,
		"schedule_id", l.ScheduleID, "fire_at", l.FireAt, "attempt", l.Attempt}, args...)...)
}

// maintain extends the leases this dispatcher holds before they lapse and
// runs the reaper, until ctx ends.
func (r *run) maintain(ctx context.Context) {
	every := r.cfg.LeaseFor / 4
	extend := time.NewTicker(every)
	defer extend.Stop()
	reap := time.NewTicker(r.cfg.LeaseFor / 2)
	defer reap.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-extend.C:
			r.extend(every)
		case <-reap.C:
			octx, cancel := r.op()
			n, err := r.q.Reap(octx)
			cancel()
			switch {
			case err != nil:
				r.log.Error("relay: reap failed", "err", err)
			case n > 0:
				r.log.Info("relay: returned expired leases", "count", n)
				signal(r.kick)
			}
		}
	}
}

// extend renews every held lease last renewed at least age ago.
func (r *run) extend(age time.Duration) {
	r.mu.Lock()
	var due []*tracked
	for _, t := range r.leases {
		t.mu.Lock()
		if time.Since(t.renewed) >= age {
			due = append(due, t)
		}
		t.mu.Unlock()
	}
	r.mu.Unlock()
	// Side by side, each bounded by the renewal period: an extension stuck
	// on a store node that is down holds up neither the others nor the
	// next pass, so the leases of the nodes that are up are renewed before
	// they lapse (a failed one is tried again at the next pass).
	sem := make(chan struct{}, extendParallel)
	var wg sync.WaitGroup
	for _, t := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r.extendOne(t, min(r.cfg.OpTimeout, age))
		})
	}
	wg.Wait()
}

// extendParallel bounds the lease extensions one renewal pass runs at once.
const extendParallel = 64

// extendOne renews one held lease, giving up after within.
func (r *run) extendOne(t *tracked, within time.Duration) {
	ctx, cancel := context.WithTimeout(r.ops, within)
	l, err := r.q.Extend(ctx, t.current(), r.cfg.LeaseFor)
	cancel()
	switch {
	case err == nil:
		t.mu.Lock()
		t.lease, t.renewed = l, time.Now()
		t.mu.Unlock()
	case errors.Is(err, ErrLeaseLost):
		r.lost(t)
	default:
		r.log.Warn("relay: extending a lease failed", "schedule_id", t.id, "err", err)
	}
}

// lost cancels the delivery of a lease another holder or a cancel took.
func (r *run) lost(t *tracked) {
	r.log.Info("relay: lease lost", "schedule_id", t.id, "agent_id", t.agent)
	t.mu.Lock()
	cancel := t.cancel
	t.mu.Unlock()
	if cancel != nil {
		cancel() // the delivery's settle then meets ErrLeaseLost
	}
}
