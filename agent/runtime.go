package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/chronoscron/chronos/agent/inputs"
	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// Config configures a Runtime. Zero fields take the defaults stated.
type Config struct {
	// Home is the agent's home directory (required).
	Home string
	// Location is the zone of jobs that name none (default UTC).
	Location *time.Location
	// Logger receives the runtime's logs (default: discarded).
	Logger *slog.Logger
	// Now is the clock (default time.Now). Lease expiry and lateness are
	// judged by it.
	Now func() time.Time
	// Runners adds or replaces runners by payload kind, beside the built-in
	// shell and http runners.
	Runners map[string]runner.Runner
	// LeaseTTL is how long a claim lives without renewal (default 60 s); a
	// live run renews it every third of that.
	LeaseTTL time.Duration
	// LockTimeout bounds the wait for the store lock in Fire; past it Fire
	// answers FireBusy (default 2 s).
	LockTimeout time.Duration
	// MaxCatchUp bounds how many overdue slots misfire run_all runs
	// (default 10); the rest are recorded missed.
	MaxCatchUp int
	// OutputCap caps each run's output file (default 1 MiB).
	OutputCap int64
	// Retention is how long ledger days and output files are kept (default
	// 30 days); pruning runs at Open. Negative disables pruning.
	Retention time.Duration
	// WatchInterval is how often jobs.json is checked for changes made by
	// other processes, and the ledger for lines they appended (default
	// 250 ms).
	WatchInterval time.Duration
	// Host overrides the host name used in claim owners (tests).
	Host string
	// NotifyAddresses says which webhook addresses a job's notify targets
	// may name; by default only public ones.
	NotifyAddresses notify.AddressPolicy
	// NotifyResolver, when set (net.DefaultResolver in a serving agent),
	// resolves the webhook host names of a job added or edited, so a name
	// resolving to an address NotifyAddresses refuses is refused then, not
	// only when a notification is sent. A name that does not resolve then
	// is accepted with a warning in the log.
	NotifyResolver notify.Resolver
	// Notify tunes the notifier RunNotifier runs: Lease, Backoff,
	// MaxBackoff, GiveUp, Poll and Clock (zero: the notify package's
	// defaults; the clock defaults to Now). Owner, Log and Observe are the
	// runtime's own.
	Notify notify.Options
	// SQL names the databases a fanout's sql://NAME?QUERY inputs may query
	// (the agent configuration's sql.dsns); a job can reach no other.
	SQL map[string]inputs.DSN
	// Chains are the chain classes' policies and breaker alert targets.
	Chains ChainConfig
	// WriteFile replaces jobs.json whole (default: the store's atomic
	// write). Tests pass one that fails, to play a home that cannot be
	// written.
	WriteFile func(path string, data []byte, perm fs.FileMode) error
	// AppendFile adds a record at the end of the store's journal and makes
	// it durable (default store.AppendSync). Tests pass one that fails,
	// with WriteFile, to play a home that cannot be written.
	AppendFile func(f *os.File, data []byte) error
	// MaxJobsFile caps jobs.json (default store.DefaultMaxFileBytes): a
	// larger file is refused unread, with an error naming the limit's
	// setting, and a running agent keeps its last good jobs meanwhile.
	MaxJobsFile store.Limit
}

func (c Config) withDefaults() Config {
	if c.Location == nil {
		c.Location = time.UTC
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 60 * time.Second
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = 2 * time.Second
	}
	if c.MaxCatchUp <= 0 {
		c.MaxCatchUp = 10
	}
	if c.OutputCap <= 0 {
		c.OutputCap = 1 << 20
	}
	if c.Retention == 0 {
		c.Retention = 30 * 24 * time.Hour
	}
	if c.WatchInterval <= 0 {
		c.WatchInterval = 250 * time.Millisecond
	}
	if c.Host == "" {
		c.Host = store.Hostname()
	}
	return c
}

func (c Config) validate() error {
	if c.Home == "" {
		return errors.New("agent: config: Home is required")
	}
	for k, r := range c.Runners {
		if k == "" || r == nil {
			return fmt.Errorf("agent: config: Runners[%q] needs a kind and a runner", k)
		}
	}
	return nil
}

// liveOwners holds the owner ids of the Runtimes open in this process, so
// that one Runtime never takes another's live claim for an earlier life of
// this pid.
var liveOwners sync.Map

// judge tells whether a claim's owner is this Runtime, another one that
// provably runs (on this host), one provably gone, or unknown (the lease
// decides). Another Runtime open in this process is alive.
func (rt *Runtime) judge(c *job.Claim) store.Liveness {
	l := store.Judge(*c, rt.self, rt.where)
	if l == store.OwnerGone {
		if o, err := job.ParseOwner(c.Owner); err == nil && o.Host == rt.self.Host && o.PID == rt.self.PID {
			if _, live := liveOwners.Load(o.ID); live {
				return store.OwnerAlive
			}
		}
	}
	return l
}

// Runtime runs the jobs of one home directory. It is safe for concurrent use.
type Runtime struct {
	cfg       Config
	log       *slog.Logger
	store     *store.Store
	ledger    *ledger.Ledger
	runners   *runner.Registry
	self      job.Owner
	where     store.Where // this process's boot and pid namespace
	selfStart uint64      // this process's start time (clock ticks since boot)

	mu      sync.Mutex
	runs    map[string]*activeRun // by run id
	subs    map[chan struct{}]struct{}
	closing atomic.Bool
	wg      sync.WaitGroup

	changes chan struct{}
	stop    context.CancelFunc
	watchWG sync.WaitGroup

	persist chan struct{} // a run's processes changed: record them soon
	giveUp  chan struct{} // closed when Close stops waiting for results
	journal journal
	probe   probe
	notices notices
	inputs  *inputs.Set
}

// activeRun is a run of this process, from its claim until its result is
// durable.
type activeRun struct {
	ctx    context.Context
	jobID  string
	token  uint64
	cancel context.CancelCauseFunc
	done   chan struct{}

	// Guarded by Runtime.mu:
	procs []runner.Process // its long-lived processes, to record
	held  error            // why its finished result is not stored yet
}

// Open opens the home directory, prunes old ledger days and output, and
// starts watching jobs.json for changes.
func Open(ctx context.Context, cfg Config) (*Runtime, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	st, err := store.Open(cfg.Home, store.Options{LockTimeout: cfg.LockTimeout, Now: cfg.Now, WriteFile: cfg.WriteFile, Append: cfg.AppendFile,
		MaxFile: cfg.MaxJobsFile, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	lg, err := ledger.Open(filepath.Join(cfg.Home, "runs"))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	reg := runner.NewRegistry()
	for k, r := range cfg.Runners {
		if err := reg.Register(k, r); err != nil {
			st.Close()
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	rt := &Runtime{
		cfg:     cfg,
		log:     cfg.Logger,
		store:   st,
		ledger:  lg,
		runners: reg,
		self:    job.Owner{Host: cfg.Host, PID: os.Getpid(), ID: uuid.NewString()},
		where:   store.Where{Boot: procfs.BootID(), NS: procfs.PIDNamespace()},
		runs:    map[string]*activeRun{},
		subs:    map[chan struct{}]struct{}{},
		changes: make(chan struct{}, 1),
		persist: make(chan struct{}, 1),
		giveUp:  make(chan struct{}),
		journal: journal{kick: make(chan struct{}, 1)},
	}
	rt.selfStart, _ = procfs.StartTime(rt.self.PID)
	rt.inputs = inputs.New(inputs.Options{Addresses: cfg.NotifyAddresses, Jobs: jobOutputs{rt}, SQL: cfg.SQL, Now: cfg.Now})
	rt.notices = newNotices()
	// Notifications a crashed process made durable but never handed to
	// the outbox go there now (Add ignores ids it already has). A home
	// that cannot be written keeps them in jobs.json for a later start.
	if _, _, err := rt.outbox(); err != nil {
		rt.log.Info("notify: the outbox cannot be opened now; notifications wait in jobs.json", "error", err)
	} else if err := rt.handOver(ctx); err != nil {
		rt.log.Warn("notify: handing waiting notifications to the outbox failed", "error", err)
	}
	if cfg.Retention > 0 {
		if _, err := lg.Prune(ctx, cfg.Now(), cfg.Retention, rt.outputRoot()); err != nil {
			rt.log.Warn("ledger retention failed", "error", err)
		}
	}
	liveOwners.Store(rt.self.ID, struct{}{})
	wctx, stop := context.WithCancel(context.Background())
	rt.stop = stop
	rt.watchWG.Add(5)
	last, _ := st.Fingerprint()
	go rt.watch(wctx, last)
	go rt.cancelLoop(wctx)
	go rt.renewLoop(wctx)
	go rt.flushLoop(wctx)
	go rt.compactLoop(wctx)
	return rt, nil
}

// Store returns the job store (for the CLI and status pages).
func (rt *Runtime) Store() *store.Store { return rt.store }

// JobsReadable reports whether the store on disk can be read: nil when it
// can, else why not, without paths (jobs.json does not parse or is over
// its limit, and whether the last good jobs are used meanwhile). It reads
// jobs.json again only when it changed, and never waits for another user
// of the store (store.Health).
func (rt *Runtime) JobsReadable(ctx context.Context) error { return rt.store.Health(ctx) }

// Ledger returns the run ledger.
func (rt *Runtime) Ledger() *ledger.Ledger { return rt.ledger }

// Runners returns the runner registry.
func (rt *Runtime) Runners() *runner.Registry { return rt.runners }

// Owner returns this process's owner string (host:pid:uuid).
func (rt *Runtime) Owner() string { return rt.self.String() }

// Location returns the default zone of jobs.
func (rt *Runtime) Location() *time.Location { return rt.cfg.Location }

func (rt *Runtime) now() time.Time { return rt.cfg.Now() }

func (rt *Runtime) outputRoot() string { return filepath.Join(rt.cfg.Home, "output") }

// Changes is signalled (coalesced, never blocking the sender) after any job
// change or fire in this process, and within WatchInterval of a change made
// by another process. It has one consumer; RunTimer does not use it.
func (rt *Runtime) Changes() <-chan struct{} { return rt.changes }

// subscribe returns a private change channel for an internal consumer.
func (rt *Runtime) subscribe() (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	rt.mu.Lock()
	rt.subs[ch] = struct{}{}
	rt.mu.Unlock()
	return ch, func() {
		rt.mu.Lock()
		delete(rt.subs, ch)
		rt.mu.Unlock()
	}
}

func (rt *Runtime) signal() {
	select {
	case rt.changes <- struct{}{}:
	default:
	}
	rt.mu.Lock()
	for ch := range rt.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	rt.mu.Unlock()
}

// watch signals when jobs.json changes on disk (any process), and has the
// ledger's ObserveAll observers told of the lines other processes appended
// (ledger.Follow), each WatchInterval: before the change they usually come
// with is signalled.
func (rt *Runtime) watch(ctx context.Context, last store.Fingerprint) {
	rt.every(ctx, rt.cfg.WatchInterval, func() {
		if err := rt.ledger.Follow(ctx); err != nil && ctx.Err() == nil {
			rt.log.Debug("ledger: reading other processes' lines failed; tried again", "error", err)
		}
		if fp, err := rt.store.Fingerprint(); err == nil && fp != last {
			last = fp
			rt.signal()
		}
	})
}

// compactLoop folds the store's journal into jobs.json, off the path of
// claims, when it is due (store.CompactIfDue, asked every
// store.CompactEvery), so that the journal stays short and a home at rest
// keeps its whole state in jobs.json.
func (rt *Runtime) compactLoop(ctx context.Context) {
	rt.every(ctx, store.CompactEvery, func() {
		if err := rt.store.CompactIfDue(ctx); err != nil && ctx.Err() == nil {
			rt.log.Debug("store: compaction failed; the records stay", "error", err)
		}
	})
}

// every calls fn every d until ctx ends, then marks the background loop
// it runs as done (watchWG).
func (rt *Runtime) every(ctx context.Context, d time.Duration, fn func()) {
	defer rt.watchWG.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// InFlight returns the number of runs of this process in progress; a run
// that has ended counts until its result is stored.
func (rt *Runtime) InFlight() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.runs)
}

// errShutdown is the cause given to runs stopped by Close.
var errShutdown = errors.New("agent shut down")

// Close stops accepting fires and waits for runs in progress, and for their
// results to be stored. If ctx ends first, the remaining runs are stopped and
// recorded interrupted (and retried later under on_interrupt retry), and a
// result that still cannot be written (the store is not writable) is given
// up, with an error in the log: that run is found interrupted by the next
// start. Ledger lines held back by a failing disk are tried until ctx ends
// (at most 10 s more). The store is released.
func (rt *Runtime) Close(ctx context.Context) error {
	rt.mu.Lock()
	already := rt.closing.Swap(true)
	rt.mu.Unlock()
	if already {
		return nil
	}
	done := make(chan struct{})
	go func() {
		rt.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		rt.mu.Lock()
		for _, r := range rt.runs {
			r.cancel(errShutdown)
		}
		rt.mu.Unlock()
		close(rt.giveUp)
		// Stopped runs record themselves; this is bounded by the runners'
		// kill paths.
		<-done
		err = fmt.Errorf("agent: close: %w", ctx.Err())
	}
	// The notifier stops before the ledger's last flush, so its lines go
	// with the rest.
	if nerr := rt.closeNotices(); nerr != nil && err == nil {
		err = fmt.Errorf("agent: close: %w", nerr)
	}
	rt.stop()
	rt.watchWG.Wait()
	if lost := rt.flushBeforeClose(ctx); lost > 0 && err == nil {
		err = fmt.Errorf("agent: close: %d ledger lines could not be written: %w", lost, rt.journal.failure())
	}
	liveOwners.Delete(rt.self.ID)
	if cerr := rt.store.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("agent: close: %w", cerr)
	}
	return err
}

// newRunID returns a sortable, unique run id: UTC time then random hex.
func newRunID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "r" + now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

func newJobID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "job-" + hex.EncodeToString(b[:])
}
