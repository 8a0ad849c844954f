package relay

import (
	"context"
	"time"
)

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
