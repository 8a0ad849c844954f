package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

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
