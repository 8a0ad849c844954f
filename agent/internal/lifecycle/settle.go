package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/chronoscron/chronos/agent/internal/execute"
	"github.com/chronoscron/chronos/agent/internal/held"
	"github.com/chronoscron/chronos/agent/internal/notices"
	"github.com/chronoscron/chronos/agent/internal/runs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/store"
)

// Settlement stores how runs ended, under their fencing tokens, with the
// retries and notifications they owe; a chain step's end goes through the
// chain gate.
type Settlement struct {
	*env
	admit *Admission
	gate  *Chains
}

// completion is what the store write of a run's end decided.
type completion struct {
	state     ledger.State
	reason    string
	shutdown  bool
	discarded string
	line      ledger.Entry // the run's final ledger line
	owed      bool         // notifications joined the job's outbound rows
}

// Settle records a run's outcome. Only the holder of the current fencing
// token updates the job; any other completion is discarded and the ledger
// says so. The same write moves the job's notification streak on and
// stores the notifications the run owes, which are then handed to the
// outbox. A completion that cannot be written (a full disk, a read-only
// home) is held and written again with backoff until it is durable: the run
// stays this process's meanwhile, so its claim is never reaped and the slot
// never runs twice. Only Close's deadline gives it up. It reports whether
// the run's end is stored as this process's (not given up, not discarded).
func (sm *Settlement) Settle(log *slog.Logger, r *runs.Run, o execute.Ended) bool {
	cp := &completion{state: ledger.StateSucceeded}
	if o.Res.Err != nil {
		cp.state, cp.reason = ledger.StateFailed, o.Res.Err.Error()
	}
	if o.State != "" {
		cp.state, cp.reason = o.State, o.Reason
	}
	switch {
	case errors.Is(o.Cause, runs.ErrShutdown):
		cp.shutdown = true
		cp.state, cp.reason = ledger.StateInterrupted, "interrupted: "+runs.ErrShutdown.Error()
	case errors.Is(o.Cause, runs.ErrCancelled):
		cp.state, cp.reason = ledger.StateCancelled, o.Cause.Error()
	}
	ran := notify.Run{Output: notices.OutputTail(sm.Home, o.Output), Duration: o.Took, Fanout: o.Fanout}
	baseReason := cp.reason
	p := &Plan{}
	update := func(st *store.State) error {
		*p = Plan{}
		cp.discarded, cp.owed, cp.reason = "", false, baseReason
		return sm.complete(st, o, cp, ran, p)
	}
	if err := sm.storeCompletion(log, r, update, p); err != nil {
		// Given up at shutdown: the claim stays, and the next start records
		// the run interrupted (and retries it under on_interrupt retry).
		log.Error("run completion lost: the store is not writable and the agent is shutting down",
			"state", cp.state, "error", err)
		return false
	}
	e := cp.line
	if cp.discarded != "" {
		e = sm.finalLine(o, cp, sm.now())
		e.Discarded = true
		e.Reason = cp.discarded
		if cp.reason != "" {
			e.Reason += "; outcome: " + cp.reason
		}
	}
	sm.Lines.Record(e)
	log.Info("run ended", "state", cp.state, "discarded", cp.discarded != "", "reason", e.Reason)
	if cp.owed {
		sm.Notices.HandOverNow(context.Background())
	}
	sm.apply(context.Background(), p)
	sm.Signal()
	return cp.discarded == ""
}

// finalLine is the ledger line ending run o at now.
func (sm *Settlement) finalLine(o execute.Ended, cp *completion, now time.Time) ledger.Entry {
	c := o.Claim
	e := sm.entry(&o.Job, now, runs.Mark{RunID: c.RunID, State: cp.state, Slot: c.Slot, Trig: runs.Trigger(c.Trigger), Reason: cp.reason})
	e.Token, e.Attempt, e.Forced, e.Output, e.ExitCode = c.Token, c.Attempt, c.Forced, o.Output, o.Res.ExitCode
	if o.Res.Err != nil {
		e.Error = o.Res.Err.Error()
	}
	return e
}

// complete is the store write of a run's end: the claim is dropped under
// its fencing token, the job's last-run fields, retry and streaks are
// updated and the notifications owed are stored with them.
func (sm *Settlement) complete(st *store.State, o execute.Ended, cp *completion, ran notify.Run, p *Plan) error {
	j, c := o.Job, o.Claim
	now := sm.now()
	cur := st.Job(j.ID)
	if cur == nil {
		cp.discarded = "completion discarded: the job was removed"
		return nil
	}
	if !cur.DropClaim(c.RunID, c.Token) {
		cp.discarded = fmt.Sprintf("completion discarded: claim with token %d no longer held (lease lost or replaced)", c.Token)
		return nil
	}
	cur.LastRunAt = utcPtr(now)
	cur.LastRunID = c.RunID
	cur.LastStatus = string(cp.state)
	cur.LastError = cp.reason
	cur.UpdatedAt = now.UTC()
	switch cp.state {
	case ledger.StateSkipped, ledger.StateCancelled:
		// Declined or stopped on request: neither a success nor a failure
		// of the job's command.
	case ledger.StateSucceeded, ledger.StatePartial:
		cur.FailureStreak = 0
		cur.LastSuccessAt = utcPtr(now)
		cur.LastSuccessSlot = utcPtr(c.Slot)
		cur.LastSuccessRun = c.RunID
	default:
		cur.FailureStreak++
	}
	if cp.shutdown && (cur.OnInterrupt == job.InterruptRetry || cur.JobKind == job.JobKindFanout) && c.Attempt < cur.Retry.Attempts() {
		d := cur.Retry.Delay(c.Attempt + 1)
		cur.Pending = append(cur.Pending, job.Pending{RunID: c.RunID, Slot: c.Slot, Trigger: string(runs.Retry),
			Attempt: c.Attempt + 1, NotBefore: now.Add(d).UTC(), Cause: job.PendingRetry, Forced: c.Forced,
			Reason: fmt.Sprintf("retry %d/%d after shutdown", c.Attempt+1, cur.Retry.Attempts())})
		cp.reason += fmt.Sprintf("; retry %d/%d in %s", c.Attempt+1, cur.Retry.Attempts(), d)
	}
	cp.line = sm.finalLine(o, cp, now)
	cp.owed = cp.state != ledger.StateCancelled && notices.Owe(cur, cp.line, ran)
	// The chain hears of this run's end before a pending run of the step
	// starts (or is refused by it) in drain.
	sm.gate.ended(st, cur, cp, p)
	if !sm.Runs.Closing() {
		if err := sm.admit.drain(st, cur, now, p); err != nil {
			return err
		}
	}
	return nil
}

// storeCompletion applies update until it is durable: a busy lock is
// retried at once, any other failure after a backoff (100 ms doubling to
// 5 s), while r is marked held. It gives up only when Close stops waiting.
func (sm *Settlement) storeCompletion(log *slog.Logger, r *runs.Run, update func(*store.State) error, p *Plan) error {
	failures := 0
	for {
		err := sm.Store.Update(context.Background(), update)
		if err == nil {
			if failures > 0 {
				log.Info("run completion stored", "after_failures", failures)
				sm.Runs.SetHeld(r, nil)
			}
			return nil
		}
		sm.unregister(p)
		if errors.Is(err, store.ErrLockTimeout) {
			select {
			case <-sm.Runs.GiveUp():
				return err
			default:
				continue
			}
		}
		failures++
		if failures == 1 {
			log.Error("run completion not stored; holding it and trying again", "error", err)
		}
		sm.Runs.SetHeld(r, err)
		t := time.NewTimer(held.Backoff.Delay(failures))
		select {
		case <-sm.Runs.GiveUp():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
