package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/store"
)

// notices is a Runtime's side of notifications: the outbox it hands rows
// to and the notifier that drains it. They are opened when the runtime
// opens, or, if the home cannot be written then (a read-only home), when
// they are first needed.
type notices struct {
	mu       sync.Mutex
	box      *notify.FileOutbox // nil until opened
	notifier *notify.Notifier
	closed   bool

	running chan struct{} // holds a token while RunNotifier runs, and once closed
	stop    chan struct{} // closed by Close: RunNotifier returns
}

func newNotices() notices {
	return notices{running: make(chan struct{}, 1), stop: make(chan struct{})}
}

// errNoticesClosed: the runtime is closed.
var errNoticesClosed = errors.New("agent: the notification outbox is closed")

// outbox returns the home's outbox and notifier, opening them the first
// time: the outbox in the home's notify/, the secret there, and a notifier
// whose claims are made as this runtime's owner and whose webhooks are
// signed with that secret and dialled only where cfg.NotifyAddresses allows.
func (rt *Runtime) outbox() (*notify.FileOutbox, *notify.Notifier, error) {
	n := &rt.notices
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return nil, nil, errNoticesClosed
	case n.box != nil:
		return n.box, n.notifier, nil
	}
	dir := notify.HomeDir(rt.cfg.Home)
	box, err := notify.OpenFileOutbox(dir, notify.FileOptions{Now: rt.cfg.Now, Log: rt.log})
	if err != nil {
		return nil, nil, fmt.Errorf("agent: %w", err)
	}
	secret, err := notify.LoadOrCreateSecret(dir)
	if err != nil {
		box.Close()
		return nil, nil, fmt.Errorf("agent: %w", err)
	}
	senders := notify.Senders{
		Webhook: notify.NewWebhookSender(notify.WebhookOptions{Secret: secret, Addresses: rt.cfg.NotifyAddresses, Now: rt.cfg.Now}),
		Command: notify.CommandSender{},
		File:    notify.FileSender{},
	}
	opts := rt.cfg.Notify
	opts.Owner = rt.self.String()
	opts.Log = rt.log.With("component", "notifier")
	opts.Observe = rt.observeNotification
	if opts.Clock == nil {
		opts.Clock = runtimeClock{now: rt.cfg.Now}
	}
	n.box, n.notifier = box, notify.New(box, senders, opts)
	return n.box, n.notifier, nil
}

// runtimeClock is the notifier's clock by default: the runtime's Now, so
// the outbox's leases and the notifier's deadlines agree.
type runtimeClock struct{ now func() time.Time }

func (c runtimeClock) Now() time.Time                         { return c.now() }
func (c runtimeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Outbox returns the home's notification outbox (for listing and
// replay), opening it if that has not been possible yet.
func (rt *Runtime) Outbox() (*notify.FileOutbox, error) {
	box, _, err := rt.outbox()
	return box, err
}

// notifierRetry is how often RunNotifier tries again to open an outbox it
// could not open.
const notifierRetry = 5 * time.Second

// RunNotifier drains the home's outbox until ctx ends or the runtime
// closes: it hands over notifications still waiting in jobs.json, resumes
// whatever an earlier process left open, and sends each notification as it
// becomes owed, retrying with backoff. A Runtime runs one notifier: a call
// made while another runs returns nil at once. RunTimer calls it; a serving
// agent with another provider calls it itself.
func (rt *Runtime) RunNotifier(ctx context.Context) error {
	n := &rt.notices
	select {
	case n.running <- struct{}{}:
	default:
		return nil
	}
	defer func() { <-n.running }()
	select {
	case <-n.stop:
		return nil
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		_, notifier, err := rt.outbox()
		if err == nil {
			if err := rt.handOver(ctx); err != nil && ctx.Err() == nil {
				rt.log.Warn("notify: handing waiting notifications to the outbox failed; trying again after the next run", "error", err)
			}
			return notifier.Run(ctx)
		}
		if errors.Is(err, errNoticesClosed) {
			return nil
		}
		rt.log.Warn("notify: the outbox cannot be opened; trying again", "error", err, "in", notifierRetry)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(notifierRetry):
		}
	}
}

// closeNotices stops a running notifier, waits for it and closes the
// outbox.
func (rt *Runtime) closeNotices() error {
	n := &rt.notices
	close(n.stop)
	// Wait for a running notifier to return, and keep the token: none
	// starts after this.
	n.running <- struct{}{}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	if n.box == nil {
		return nil
	}
	return n.box.Close()
}

// owe plans the notifications of a run of j that ended with line e (the
// ledger line about to be written), under the store lock: j's streak moves
// on and the rows join j.Outbound, durable in the same write as the run's
// final state. ran gives what the line does not: the run's output,
// duration and, for a fanout parent, its children's counts. It reports
// whether any row was added. A job without targets owes nothing and keeps
// no streak.
func (rt *Runtime) owe(j *job.Job, e ledger.Entry, ran notify.Run) bool {
	if len(j.Targets) == 0 {
		return false
	}
	run := notify.Run{
		JobID: j.ID, RunID: e.RunID, Slot: e.Slot, Status: string(e.State), Runner: e.Runner,
		Code: e.ExitCode, Output: ran.Output, Duration: ran.Duration, Error: e.Error,
		Ledger: ledgerRef(e), Ended: e.Time, Fanout: ran.Fanout,
	}
	if run.Error == "" && e.State != ledger.StateSucceeded {
		run.Error = e.Reason
	}
	var rows []notify.Notification
	j.NotifyStreak, rows = notify.Plan(j.Policy, j.NotifyStreak, run)
	j.Outbound = append(j.Outbound, rows...)
	return len(rows) > 0
}

// ledgerRef names the ledger line e: its day file and its run id.
func ledgerRef(e ledger.Entry) string {
	return "runs/" + e.Time.UTC().Format("2006-01-02") + ".jsonl#" + e.RunID
}

// handOver moves every notification waiting in jobs.json to the outbox:
// Add (idempotent by id) first, then a second write drops the added rows
// from jobs.json, then the notifier is woken. A crash between the two
// leaves rows in both places; the next hand-over adds them again, which
// adds nothing.
func (rt *Runtime) handOver(ctx context.Context) error {
	var rows []notify.Notification
	err := rt.store.View(ctx, func(st *store.State) error {
		for _, j := range st.All() {
			rows = append(rows, j.Outbound...)
		}
		rows = append(rows, breakerRows(st)...)
		return nil
	})
	if err != nil || len(rows) == 0 {
		return err
	}
	box, notifier, err := rt.outbox()
	if err != nil {
		return err
	}
	if _, err := box.Add(ctx, rows...); err != nil {
		return fmt.Errorf("agent: hand notifications to the outbox: %w", err)
	}
	notifier.Wake()
	added := make(map[string]bool, len(rows))
	for _, r := range rows {
		added[r.ID] = true
	}
	err = rt.store.Update(ctx, func(st *store.State) error {
		for _, j := range st.All() {
			kept := j.Outbound[:0:0]
			for _, r := range j.Outbound {
				if !added[r.ID] {
					kept = append(kept, r)
				}
			}
			if len(kept) == 0 {
				kept = nil
			}
			j.Outbound = kept
		}
		dropBreakerRows(st, added)
		return nil
	})
	if err != nil {
		return fmt.Errorf("agent: clear handed-over notifications: %w", err)
	}
	return nil
}

// handOverNow hands waiting notifications over after a write that added
// some; a failure leaves them in jobs.json for the next hand-over.
func (rt *Runtime) handOverNow(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := rt.handOver(ctx); err != nil {
		rt.log.Warn("notify: hand-over failed; the notifications wait in jobs.json for the next one", "error", err)
	}
}

// observeNotification writes the ledger line of a notification that was
// sent or given up on (dead).
func (rt *Runtime) observeNotification(r notify.Row, a notify.Attempt) {
	var state ledger.State
	switch a.State {
	case notify.StateSent:
		state = ledger.StateSent
	case notify.StateDead:
		state = ledger.StateDead
	default:
		return
	}
	b := r.Body
	e := ledger.Entry{
		Time: a.At.UTC(), RunID: b.RunID, JobID: b.JobID, State: state, Slot: b.Slot.UTC(),
		Attempt: r.Attempts + 1, Owner: rt.self.String(), Error: a.Error,
		Kind: ledger.KindNotification, Notification: r.ID, Event: string(b.Event),
		Target: string(r.Target.Kind) + " " + r.Target.Where(),
	}
	if a.Status != 0 {
		e.ExitCode = a.Status
	}
	if e.Time.IsZero() {
		e.Time = rt.now().UTC()
	}
	rt.record(e)
}

// outputTail returns the end of a run's output file (rel to the home):
// enough for notify.Tail to keep MaxOutput bytes and tell it was cut.
func (rt *Runtime) outputTail(rel string) string {
	if rel == "" {
		return ""
	}
	f, err := os.Open(filepath.Join(rt.cfg.Home, rel))
	if err != nil {
		return ""
	}
	defer f.Close()
	const want = notify.MaxOutput + utf8.UTFMax
	if fi, err := f.Stat(); err == nil && fi.Size() > want {
		if _, err := f.Seek(-want, io.SeekEnd); err != nil {
			return ""
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, want))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b)
}
