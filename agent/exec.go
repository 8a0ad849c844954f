package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/output"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// register records a run about to start in this process, so the reaper
// treats its claim as live from the moment it is written. It refuses while
// the runtime closes.
func (rt *Runtime) register(jobID string, c job.Claim) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closing.Load() {
		return errDraining
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	rt.runs[c.RunID] = &activeRun{ctx: ctx, jobID: jobID, token: c.Token, cancel: cancel, done: make(chan struct{})}
	rt.wg.Add(1)
	return nil
}

// unregister drops runs registered by an update that was not committed.
func (rt *Runtime) unregister(p *plan) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, id := range p.reg {
		if r, ok := rt.runs[id]; ok {
			r.cancel(errors.New("claim not committed"))
			close(r.done)
			delete(rt.runs, id)
			rt.wg.Done()
		}
	}
	p.reg = nil
}

func (rt *Runtime) isActive(runID string, token uint64) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r, ok := rt.runs[runID]
	return ok && r.token == token
}

func (rt *Runtime) cancelRun(runID string, cause error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if r, ok := rt.runs[runID]; ok {
		r.cancel(cause)
	}
}

// runDone returns a channel closed when the local run ends, or nil.
func (rt *Runtime) runDone(runID string) <-chan struct{} {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if r, ok := rt.runs[runID]; ok {
		return r.done
	}
	return nil
}

// start launches a claimed run in the background.
func (rt *Runtime) start(s startReq) {
	rt.mu.Lock()
	r := rt.runs[s.claim.RunID]
	rt.mu.Unlock()
	if r == nil || r.token != s.claim.Token {
		return
	}
	go rt.execute(r.ctx, r, s)
}

// execute runs one claimed slot: ledger running, lease renewal, the runner,
// then the completion under the fencing token.
func (rt *Runtime) execute(ctx context.Context, r *activeRun, s startReq) {
	defer func() {
		rt.mu.Lock()
		delete(rt.runs, s.claim.RunID)
		rt.mu.Unlock()
		close(r.done)
		rt.wg.Done()
	}()
	j, c := s.job, s.claim
	log := rt.log.With("job_id", j.ID, "run_id", c.RunID, "fire_at", c.Slot, "attempt", c.Attempt)
	rel := outputRel(j.ID, c.RunID)
	out := &outputFile{path: filepath.Join(rt.cfg.Home, rel)}
	if !s.announced {
		rt.record(rt.runningLine(s))
	}
	started := rt.now()
	kr := rt.runKind(ctx, r, s, out, log)
	res := kr.res
	if cerr := out.Close(); cerr != nil && res.Err == nil {
		res.Err = cerr
	}
	stored := rt.finish(log, r, ended{job: j, claim: c, output: rel, res: res, cause: context.Cause(ctx), took: rt.now().Sub(started),
		state: kr.state, reason: kr.reason, fanout: kr.fanout})
	if stored && j.JobKind == job.JobKindFanout && !errors.Is(context.Cause(ctx), errShutdown) {
		rt.dropPlan(c.RunID, log)
	}
}

// runningLine is the ledger line of s's run starting.
func (rt *Runtime) runningLine(s startReq) ledger.Entry {
	c := s.claim
	e := rt.entry(&s.job, rt.now(), mark{c.RunID, ledger.StateRunning, c.Slot, Trigger(c.Trigger), ""})
	e.Token, e.Attempt, e.Forced, e.Output = c.Token, c.Attempt, c.Forced, outputRel(s.job.ID, c.RunID)
	return e
}

// outputRel is the path of a run's output file, relative to the home.
func outputRel(jobID, runID string) string {
	return filepath.Join("output", jobID, runID+".log")
}

// runPayload runs the job's payload for claim c under the job's timeout.
func (rt *Runtime) runPayload(ctx context.Context, r *activeRun, s startReq, out io.Writer, log *slog.Logger) runner.Result {
	j, c := s.job, s.claim
	rn, gerr := rt.runners.Get(j.Payload.Kind)
	if gerr != nil {
		return runner.Result{Err: gerr}
	}
	runCtx := ctx
	if j.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(ctx, j.Timeout.Std(), fmt.Errorf("timeout after %s", j.Timeout.Std()))
		defer cancel()
	}
	log.Info("run started")
	req := rt.runRequest(&j, c)
	req.Output, req.Stderr = capped(out, rt.cfg.OutputCap)
	req.Processes = func(ps []runner.Process) { rt.noteProcs(r, ps) }
	res := rn.Run(runCtx, req)
	if cause := context.Cause(runCtx); res.Err != nil && cause != nil && !strings.Contains(res.Err.Error(), cause.Error()) {
		res.Err = fmt.Errorf("%w (%w)", res.Err, cause)
	}
	return res
}

// noteProcs keeps the latest list of a run's processes and asks the renew
// loop to record it.
func (rt *Runtime) noteProcs(r *activeRun, ps []runner.Process) {
	rt.mu.Lock()
	r.procs = append(r.procs[:0:0], ps...)
	rt.mu.Unlock()
	select {
	case rt.persist <- struct{}{}:
	default:
	}
}

// capped returns the writers of a run's standard output and standard error
// into out, under one limit of capBytes; stderr is nil (both streams into
// out) when out cannot keep them apart.
func capped(out io.Writer, capBytes int64) (stdout, stderr io.Writer) {
	cw := &runner.CapWriter{W: out, Limit: capBytes}
	if o, ok := out.(interface{ Stderr() io.Writer }); ok {
		return cw, cw.Stream(o.Stderr())
	}
	return cw, nil
}

// outputFile is a run's output file (output/<job>/<run>.log), created at
// the first byte the run writes: a run that prints nothing leaves no file,
// and in a burst of such runs the disk is spared a file per run. A file
// that cannot be created fails every write, and Close returns why, so the
// run is recorded failed with the reason.
//
// The file holds both streams (what every reader of the output reads),
// each in the order the run wrote it and the two in the order they were
// read from their pipes; the byte ranges that came from standard error are
// written at Close beside it (output.StreamsFile), so that a reader can
// show the two apart. A file without it (a run recorded before the streams
// were told apart, or an agent that died mid-run) is one stream.
type outputFile struct {
	path   string
	mu     sync.Mutex
	f      *os.File
	err    error
	size   int64
	stderr [][2]int64 // [start, end) of each stretch of standard error
}

func (o *outputFile) Write(p []byte) (int, error) { return o.write(p, false) }

// Stderr returns the writer of the run's standard error into the file.
func (o *outputFile) Stderr() io.Writer { return stderrWriter{o} }

// stderrWriter writes a run's standard error into its output file.
type stderrWriter struct{ o *outputFile }

func (w stderrWriter) Write(p []byte) (int, error) { return w.o.write(p, true) }

func (o *outputFile) write(p []byte, stderr bool) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil && o.err == nil {
		if o.f, o.err = openOutput(o.path); o.err != nil {
			o.err = fmt.Errorf("output: %w", o.err)
		}
	}
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.f.Write(p)
	if stderr && n > 0 {
		if k := len(o.stderr); k > 0 && o.stderr[k-1][1] == o.size {
			o.stderr[k-1][1] += int64(n)
		} else {
			o.stderr = append(o.stderr, [2]int64{o.size, o.size + int64(n)})
		}
	}
	o.size += int64(n)
	return n, err
}

// Close closes the file if the run wrote any, writes the ranges of
// standard error beside it, and returns the error that kept it from being
// created or closed ("output: ...").
func (o *outputFile) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return o.err
	}
	err := o.f.Close()
	o.f = nil
	if err != nil && o.err == nil {
		o.err = fmt.Errorf("output: %w", err)
	}
	if o.err == nil {
		data, _ := json.Marshal(output.Streams{Stderr: o.stderr})
		if err := os.WriteFile(output.StreamsFile(o.path), data, 0o600); err != nil {
			o.err = fmt.Errorf("output: %w", err)
		}
	}
	return o.err
}

func openOutput(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}

// renewLoop extends the leases of all runs of this process every third of
// the lease TTL, in one store update, and records their processes when
// they change; a run whose claim is gone (lease lost, replaced, job
// removed) is stopped.
func (rt *Runtime) renewLoop(ctx context.Context) {
	defer rt.watchWG.Done()
	t := time.NewTicker(rt.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rt.persist:
		}
		if rt.InFlight() == 0 {
			continue
		}
		var lost []*activeRun
		err := rt.store.Update(ctx, func(st *store.State) error {
			rt.mu.Lock()
			live := make(map[string]*activeRun, len(rt.runs))
			procs := make(map[string][]runner.Process, len(rt.runs))
			for id, r := range rt.runs {
				live[id] = r
				procs[id] = r.procs
			}
			rt.mu.Unlock()
			held := map[string]bool{}
			until := rt.now().Add(rt.cfg.LeaseTTL).UTC()
			for _, r := range live {
				j := st.Job(r.jobID)
				if j == nil {
					continue
				}
				for i := range j.Claims {
					c := &j.Claims[i]
					if lr, ok := live[c.RunID]; ok && lr.token == c.Token {
						c.LeaseUntil = until
						if ps := procs[c.RunID]; ps != nil {
							c.Procs = append(c.Procs[:0:0], ps...)
						}
						held[c.RunID] = true
					}
				}
			}
			lost = lost[:0]
			for id, r := range live {
				if !held[id] {
					lost = append(lost, r)
				}
			}
			return nil
		})
		if err != nil {
			if ctx.Err() == nil {
				rt.log.Warn("lease renewal failed", "error", err)
			}
			continue
		}
		for _, r := range lost {
			r.cancel(errLeaseLost)
		}
	}
}

var errLeaseLost = errors.New("claim lost: lease expired or taken over")

// ended is how a run ended: its job and claim, its output file (relative
// to the home), the runner's result, the cause its context ended with and
// how long the runner ran.
type ended struct {
	job    job.Job
	claim  job.Claim
	output string
	res    runner.Result
	cause  error
	took   time.Duration
	// state and reason, when state is set, are the run's end as its job
	// kind decided it (a workflow skipped, a fanout partial).
	state  ledger.State
	reason string
	// fanout counts a fanout parent's children (nil for other runs).
	fanout *notify.Fanout
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

// finish records a run's outcome. Only the holder of the current fencing
// token updates the job; any other completion is discarded and the ledger
// says so. The same write moves the job's notification streak on and
// stores the notifications the run owes, which are then handed to the
// outbox. A completion that cannot be written (a full disk, a read-only
// home) is held and written again with backoff until it is durable: the run
// stays this process's meanwhile, so its claim is never reaped and the slot
// never runs twice. Only Close's deadline gives it up. It reports whether
// the run's end is stored as this process's (not given up, not discarded).
func (rt *Runtime) finish(log *slog.Logger, r *activeRun, o ended) bool {
	cp := &completion{state: ledger.StateSucceeded}
	if o.res.Err != nil {
		cp.state, cp.reason = ledger.StateFailed, o.res.Err.Error()
	}
	if o.state != "" {
		cp.state, cp.reason = o.state, o.reason
	}
	switch {
	case errors.Is(o.cause, errShutdown):
		cp.shutdown = true
		cp.state, cp.reason = ledger.StateInterrupted, "interrupted: "+errShutdown.Error()
	case errors.Is(o.cause, errCancelled):
		cp.state, cp.reason = ledger.StateCancelled, o.cause.Error()
	}
	ran := notify.Run{Output: rt.outputTail(o.output), Duration: o.took, Fanout: o.fanout}
	baseReason := cp.reason
	p := &plan{}
	update := func(st *store.State) error {
		*p = plan{}
		cp.discarded, cp.owed, cp.reason = "", false, baseReason
		return rt.complete(st, o, cp, ran, p)
	}
	if err := rt.storeCompletion(log, r, update, p); err != nil {
		// Given up at shutdown: the claim stays, and the next start records
		// the run interrupted (and retries it under on_interrupt retry).
		log.Error("run completion lost: the store is not writable and the agent is shutting down",
			"state", cp.state, "error", err)
		return false
	}
	e := cp.line
	if cp.discarded != "" {
		e = rt.finalLine(o, cp, rt.now())
		e.Discarded = true
		e.Reason = cp.discarded
		if cp.reason != "" {
			e.Reason += "; outcome: " + cp.reason
		}
	}
	rt.record(e)
	log.Info("run ended", "state", cp.state, "discarded", cp.discarded != "", "reason", e.Reason)
	if cp.owed {
		rt.handOverNow(context.Background())
	}
	rt.apply(context.Background(), p)
	rt.signal()
	return cp.discarded == ""
}

// finalLine is the ledger line ending run o at now.
func (rt *Runtime) finalLine(o ended, cp *completion, now time.Time) ledger.Entry {
	c := o.claim
	e := rt.entry(&o.job, now, mark{c.RunID, cp.state, c.Slot, Trigger(c.Trigger), cp.reason})
	e.Token, e.Attempt, e.Forced, e.Output, e.ExitCode = c.Token, c.Attempt, c.Forced, o.output, o.res.ExitCode
	if o.res.Err != nil {
		e.Error = o.res.Err.Error()
	}
	return e
}

// complete is the store write of a run's end: the claim is dropped under
// its fencing token, the job's last-run fields, retry and streaks are
// updated and the notifications owed are stored with them.
func (rt *Runtime) complete(st *store.State, o ended, cp *completion, ran notify.Run, p *plan) error {
	j, c := o.job, o.claim
	now := rt.now()
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
		cur.Pending = append(cur.Pending, job.Pending{RunID: c.RunID, Slot: c.Slot, Trigger: string(TriggerRetry),
			Attempt: c.Attempt + 1, NotBefore: now.Add(d).UTC(), Cause: job.PendingRetry, Forced: c.Forced,
			Reason: fmt.Sprintf("retry %d/%d after shutdown", c.Attempt+1, cur.Retry.Attempts())})
		cp.reason += fmt.Sprintf("; retry %d/%d in %s", c.Attempt+1, cur.Retry.Attempts(), d)
	}
	cp.line = rt.finalLine(o, cp, now)
	cp.owed = cp.state != ledger.StateCancelled && rt.owe(cur, cp.line, ran)
	// The chain hears of this run's end before a pending run of the step
	// starts (or is refused by it) in drain.
	rt.endChainStep(st, cur, cp, p)
	if !rt.closing.Load() {
		if err := rt.drain(st, cur, now, p); err != nil {
			return err
		}
	}
	return nil
}

// storeCompletion applies update until it is durable: a busy lock is
// retried at once, any other failure after a backoff (100 ms doubling to
// 5 s), while r is marked held. It gives up only when Close stops waiting.
func (rt *Runtime) storeCompletion(log *slog.Logger, r *activeRun, update func(*store.State) error, p *plan) error {
	failures := 0
	for {
		err := rt.store.Update(context.Background(), update)
		if err == nil {
			if failures > 0 {
				log.Info("run completion stored", "after_failures", failures)
				rt.setHeld(r, nil)
			}
			return nil
		}
		rt.unregister(p)
		if errors.Is(err, store.ErrLockTimeout) {
			select {
			case <-rt.giveUp:
				return err
			default:
				continue
			}
		}
		failures++
		if failures == 1 {
			log.Error("run completion not stored; holding it and trying again", "error", err)
		}
		rt.setHeld(r, err)
		t := time.NewTimer(heldBackoff.Delay(failures))
		select {
		case <-rt.giveUp:
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func (rt *Runtime) setHeld(r *activeRun, err error) {
	rt.mu.Lock()
	r.held = err
	rt.mu.Unlock()
}
