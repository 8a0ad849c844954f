// Package recorder keeps the delivery history of a process's dispatchers
// in the store (relay.History): it wraps their deliverer, counts each
// delivery attempt by minute and outcome with its lag, keeps each agent's
// recent deliveries, and every few seconds adds what it counted to the
// store and writes the process's beat. Every process sharing the store
// adds into the same minutes, so every NAS process reads the same numbers.
package recorder

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// DefaultFlushEvery is how often a Recorder adds its counts to the store
// and beats.
const DefaultFlushEvery = 2 * time.Second

// Options configure a Recorder.
type Options struct {
	// Kind is the process's kind in its beat: "nas" or "relay".
	Kind string
	// Dispatchers is how many dispatchers the process runs.
	Dispatchers int
	// FlushEvery defaults to DefaultFlushEvery.
	FlushEvery time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Recorder counts the deliveries of the deliverers it wraps; Run writes
// them to the store.
type Recorder struct {
	store relay.History
	opts  Options
	beat  relay.ProcessBeat

	lastClaim atomic.Int64 // Unix ns; 0: none yet
	delivered atomic.Int64

	mu      sync.Mutex
	minutes map[int64]*relay.HistoryMinute
	recent  map[string][]relay.DeliveryRecord
}

// New returns a Recorder writing to store.
func New(store relay.History, o Options) *Recorder {
	if o.FlushEvery <= 0 {
		o.FlushEvery = DefaultFlushEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	host, _ := os.Hostname()
	var id [6]byte
	_, _ = rand.Read(id[:])
	return &Recorder{
		store: store, opts: o,
		beat: relay.ProcessBeat{ID: o.Kind + "-" + hex.EncodeToString(id[:]), Kind: o.Kind, Host: host, PID: os.Getpid(),
			Dispatchers: o.Dispatchers, StartedAt: o.Now().UTC()},
		minutes: map[int64]*relay.HistoryMinute{},
		recent:  map[string][]relay.DeliveryRecord{},
	}
}

// ID is the process's id in its beats.
func (r *Recorder) ID() string { return r.beat.ID }

// Wrap returns d counting each delivery in r.
func (r *Recorder) Wrap(d relay.Deliverer) relay.Deliverer {
	return relay.DelivererFunc(func(ctx context.Context, l relay.Lease) relay.Outcome {
		r.lastClaim.Store(r.opts.Now().UnixNano())
		out := d.Deliver(ctx, l)
		r.Note(l, out)
		return out
	})
}

// OutcomeOf names a dispatcher's verdict as a history outcome.
func OutcomeOf(o relay.Outcome) string {
	switch o.Kind {
	case relay.Done:
		if o.Record != nil && o.Record.Outcome == relay.LastFireInstanceStopped {
			return relay.HistoryInstanceStopped
		}
		word, _, _ := strings.Cut(o.Reason, ":")
		switch word {
		case "dropped", "duplicate":
			return relay.HistoryDropped
		case "instance_stopped":
			return relay.HistoryInstanceStopped
		}
		return relay.HistoryDelivered
	case relay.Dead:
		return relay.HistoryRejected
	}
	return relay.HistoryRetry
}

// Note counts one delivery attempt of l that ended with out.
func (r *Recorder) Note(l relay.Lease, out relay.Outcome) {
	now := r.opts.Now()
	outcome := OutcomeOf(out)
	lag := now.Sub(l.FireAt)
	rec := relay.DeliveryRecord{AgentID: l.AgentID, JobID: l.JobID, ScheduleID: l.ScheduleID, FireAt: l.FireAt.UTC(),
		Attempt: l.Attempt, Outcome: outcome, Lag: lag, At: now.UTC()}
	if outcome != relay.HistoryDelivered {
		rec.Reason = out.Reason
	} else {
		r.delivered.Add(1)
	}
	k := now.Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.minutes[k]
	if m == nil {
		m = &relay.HistoryMinute{Minute: time.Unix(k*60, 0).UTC(), Outcomes: map[string]int64{},
			Lag: make([]int64, len(relay.HistoryLagBounds)+1)}
		r.minutes[k] = m
	}
	m.Outcomes[outcome]++
	if l.Attempt > 1 {
		m.Retries++
	}
	if outcome == relay.HistoryDelivered {
		m.Lag[relay.LagBucket(max(lag, 0))]++
	}
	list := append(r.recent[l.AgentID], rec)
	if len(list) > 2*relay.HistoryRecent {
		list = append(list[:0:0], list[len(list)-relay.HistoryRecent:]...)
	}
	r.recent[l.AgentID] = list
}

// Flush adds what r counted since the last flush to the store and writes
// the process's beat. What the store refused is kept for the next flush.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	minutes := make([]relay.HistoryMinute, 0, len(r.minutes))
	for _, m := range r.minutes {
		minutes = append(minutes, *m)
	}
	var recent []relay.DeliveryRecord
	for _, list := range r.recent {
		if len(list) > relay.HistoryRecent {
			list = list[len(list)-relay.HistoryRecent:]
		}
		recent = append(recent, list...)
	}
	r.minutes, r.recent = map[int64]*relay.HistoryMinute{}, map[string][]relay.DeliveryRecord{}
	r.mu.Unlock()
	if err := r.store.AddHistory(ctx, minutes, recent); err != nil {
		r.mu.Lock()
		for _, m := range minutes {
			k := m.Minute.Unix() / 60
			if cur := r.minutes[k]; cur != nil {
				cur.Add(m)
			} else {
				mm := m
				r.minutes[k] = &mm
			}
		}
		r.mu.Unlock()
		return fmt.Errorf("recorder: flush: %w", err)
	}
	b := r.beat
	b.BeatAt = r.opts.Now().UTC()
	if ns := r.lastClaim.Load(); ns != 0 {
		b.LastClaim = time.Unix(0, ns).UTC()
	}
	b.Delivered = r.delivered.Load()
	if err := r.store.Beat(ctx, b); err != nil {
		return fmt.Errorf("recorder: beat: %w", err)
	}
	return nil
}

// Run flushes every FlushEvery until ctx ends, then once more.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.FlushEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := r.Flush(fctx); err != nil {
				r.opts.Logger.Debug("delivery history not written at shutdown", "err", err)
			}
			cancel()
			return
		case <-t.C:
			err := r.Flush(ctx)
			switch {
			case err != nil && !failing:
				r.opts.Logger.Warn("delivery history not written; kept for the next try", "err", err)
			case err == nil && failing:
				r.opts.Logger.Info("delivery history written again")
			}
			failing = err != nil
		}
	}
}
