package relay

import (
	"context"
	"errors"
	"sync"
	"time"
)

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
