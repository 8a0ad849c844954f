// Package notices is a runtime's side of notifications: the outbox it hands
// rows to and the notifier that drains it, and the planning of the rows a
// run's end owes, made durable in jobs.json with the run's final state.
package notices

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// Config is what the outbox and its notifier are opened with.
type Config struct {
	Home  string
	Now   func() time.Time
	Log   *slog.Logger
	Store *store.Store
	// Owner names this runtime in the notifier's claims.
	Owner string
	// Addresses says where webhooks may be dialled.
	Addresses notify.AddressPolicy
	// Notify tunes the notifier (Owner, Log and Observe are set here).
	Notify notify.Options
	// Record writes the ledger lines of notifications sent or given up.
	Record func(...ledger.Entry)
}

// Notices is the outbox and the notifier of one home. They are opened
// when the runtime opens, or, if the home cannot be written then (a
// read-only home), when they are first needed.
type Notices struct {
	cfg Config

	mu       sync.Mutex
	box      *notify.FileOutbox // nil until opened
	notifier *notify.Notifier
	closed   bool

	running chan struct{} // holds a token while Run runs, and once closed
	stop    chan struct{} // closed by Close: Run returns
}

// New returns the notices of cfg's home, not opened yet.
func New(cfg Config) *Notices {
	return &Notices{cfg: cfg, running: make(chan struct{}, 1), stop: make(chan struct{})}
}

// ErrClosed: the runtime is closed.
var ErrClosed = errors.New("agent: the notification outbox is closed")

// Outbox returns the home's outbox and notifier, opening them the first
// time: the outbox in the home's notify/, the secret there, and a notifier
// whose claims are made as this runtime's owner and whose webhooks are
// signed with that secret and dialled only where Config.Addresses allows.
func (n *Notices) Outbox() (*notify.FileOutbox, *notify.Notifier, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return nil, nil, ErrClosed
	case n.box != nil:
		return n.box, n.notifier, nil
	}
	dir := notify.HomeDir(n.cfg.Home)
	box, err := notify.OpenFileOutbox(dir, notify.FileOptions{Now: n.cfg.Now, Log: n.cfg.Log})
	if err != nil {
		return nil, nil, fmt.Errorf("agent: %w", err)
	}
	secret, err := notify.LoadOrCreateSecret(dir)
	if err != nil {
		box.Close()
		return nil, nil, fmt.Errorf("agent: %w", err)
	}
	senders := notify.Senders{
		Webhook: notify.NewWebhookSender(notify.WebhookOptions{Secret: secret, Addresses: n.cfg.Addresses, Now: n.cfg.Now}),
		Command: notify.CommandSender{},
		File:    notify.FileSender{},
	}
	opts := n.cfg.Notify
	opts.Owner = n.cfg.Owner
	opts.Log = n.cfg.Log.With("component", "notifier")
	opts.Observe = n.observe
	if opts.Clock == nil {
		opts.Clock = clock{now: n.cfg.Now}
	}
	n.box, n.notifier = box, notify.New(box, senders, opts)
	return n.box, n.notifier, nil
}

// clock is the notifier's clock by default: the runtime's Now, so the
// outbox's leases and the notifier's deadlines agree.
type clock struct{ now func() time.Time }

func (c clock) Now() time.Time                         { return c.now() }
func (c clock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// notifierRetry is how often Run tries again to open an outbox it could
// not open.
const notifierRetry = 5 * time.Second

// Run drains the home's outbox until ctx ends or Close is called: it hands
// over notifications still waiting in jobs.json, resumes whatever an
// earlier process left open, and sends each notification as it becomes
// owed, retrying with backoff. One runs at a time: a call made while
// another runs returns nil at once.
func (n *Notices) Run(ctx context.Context) error {
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
		_, notifier, err := n.Outbox()
		if err == nil {
			if err := n.HandOver(ctx); err != nil && ctx.Err() == nil {
				n.cfg.Log.Warn("notify: handing waiting notifications to the outbox failed; trying again after the next run", "error", err)
			}
			return notifier.Run(ctx)
		}
		if errors.Is(err, ErrClosed) {
			return nil
		}
		n.cfg.Log.Warn("notify: the outbox cannot be opened; trying again", "error", err, "in", notifierRetry)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(notifierRetry):
		}
	}
}

// Running reports whether Run is running (or Close has been called).
func (n *Notices) Running() bool { return len(n.running) > 0 }

// Close stops a running notifier, waits for it and closes the outbox.
func (n *Notices) Close() error {
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

// HandOver moves every notification waiting in jobs.json to the outbox:
// Add (idempotent by id) first, then a second write drops the added rows
// from jobs.json, then the notifier is woken. A crash between the two
// leaves rows in both places; the next hand-over adds them again, which
// adds nothing.
func (n *Notices) HandOver(ctx context.Context) error {
	var rows []notify.Notification
	err := n.cfg.Store.View(ctx, func(st *store.State) error {
		for _, j := range st.All() {
			rows = append(rows, j.Outbound...)
		}
		rows = append(rows, breakerRows(st)...)
		return nil
	})
	if err != nil || len(rows) == 0 {
		return err
	}
	box, notifier, err := n.Outbox()
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
	err = n.cfg.Store.Update(ctx, func(st *store.State) error {
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

// HandOverNow hands waiting notifications over after a write that added
// some; a failure leaves them in jobs.json for the next hand-over.
func (n *Notices) HandOverNow(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := n.HandOver(ctx); err != nil {
		n.cfg.Log.Warn("notify: hand-over failed; the notifications wait in jobs.json for the next one", "error", err)
	}
}

// observe writes the ledger line of a notification that was sent or given
// up on (dead).
func (n *Notices) observe(r notify.Row, a notify.Attempt) {
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
		Attempt: r.Attempts + 1, Owner: n.cfg.Owner, Error: a.Error,
		Kind: ledger.KindNotification, Notification: r.ID, Event: string(b.Event),
		Target: string(r.Target.Kind) + " " + r.Target.Where(),
	}
	if a.Status != 0 {
		e.ExitCode = a.Status
	}
	if e.Time.IsZero() {
		e.Time = n.cfg.Now().UTC()
	}
	n.cfg.Record(e)
}

// breakerRows returns the breaker alerts waiting in jobs.json.
func breakerRows(st *store.State) []notify.Notification {
	var rows []notify.Notification
	for _, b := range st.Breakers() {
		rows = append(rows, b.Outbound...)
	}
	return rows
}

// dropBreakerRows drops the alerts the outbox has taken.
func dropBreakerRows(st *store.State, added map[string]bool) {
	for _, b := range st.Breakers() {
		var kept []notify.Notification
		for _, r := range b.Outbound {
			if !added[r.ID] {
				kept = append(kept, r)
			}
		}
		b.Outbound = kept
	}
}

// Owe plans the notifications of a run of j that ended with line e (the
// ledger line about to be written), under the store lock: j's streak moves
// on and the rows join j.Outbound, durable in the same write as the run's
// final state. ran gives what the line does not: the run's output,
// duration and, for a fanout parent, its children's counts. It reports
// whether any row was added. A job without targets owes nothing and keeps
// no streak.
func Owe(j *job.Job, e ledger.Entry, ran notify.Run) bool {
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

// OutputTail returns the end of a run's output file (rel to home): enough
// for notify.Tail to keep MaxOutput bytes and tell it was cut.
func OutputTail(home, rel string) string {
	if rel == "" {
		return ""
	}
	f, err := os.Open(filepath.Join(home, rel))
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
