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
	"time"

	"github.com/google/uuid"

	"github.com/chronoscron/chronos/agent/inputs"
	"github.com/chronoscron/chronos/agent/internal/execute"
	"github.com/chronoscron/chronos/agent/internal/held"
	"github.com/chronoscron/chronos/agent/internal/lifecycle"
	"github.com/chronoscron/chronos/agent/internal/notices"
	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/agent/internal/runs"
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
		c.Host = runs.Hostname()
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

// Runtime runs the jobs of one home directory. It is safe for concurrent use.
//
// It is the façade over the parts that do the work: Admission, Settlement,
// Recovery and the chain gate (package lifecycle) decide slots, the
// executor (package execute) runs what is claimed. Its job, chain and
// recovery operations and its timing are declared on jobOps, chainOps,
// recoveryOps and timerOps.
type Runtime struct {
	jobOps
	chainOps
	recoveryOps
	timerOps

	cfg     Config
	log     *slog.Logger
	store   *store.Store
	ledger  *ledger.Ledger
	runners *runner.Registry
	self    job.Owner

	runs    *runs.Registry // this process's runs
	lines   *held.Lines    // ledger lines, held while they cannot be written
	notices *notices.Notices
	exec    *execute.Executor
	lc      *lifecycle.Lifecycle

	mu      sync.Mutex
	subs    map[chan struct{}]struct{}
	changes chan struct{}
	stop    context.CancelFunc
	watchWG sync.WaitGroup
	probe   probe
	inputs  *inputs.Set
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
		runs:    runs.NewRegistry(),
		subs:    map[chan struct{}]struct{}{},
		changes: make(chan struct{}, 1),
	}
	rt.jobOps, rt.chainOps, rt.recoveryOps, rt.timerOps = jobOps{rt}, chainOps{rt}, recoveryOps{rt}, timerOps{rt}
	rt.wire()
	// Notifications a crashed process made durable but never handed to
	// the outbox go there now (Add ignores ids it already has). A home
	// that cannot be written keeps them in jobs.json for a later start.
	if _, _, err := rt.notices.Outbox(); err != nil {
		rt.log.Info("notify: the outbox cannot be opened now; notifications wait in jobs.json", "error", err)
	} else if err := rt.notices.HandOver(ctx); err != nil {
		rt.log.Warn("notify: handing waiting notifications to the outbox failed", "error", err)
	}
	if cfg.Retention > 0 {
		if _, err := lg.Prune(ctx, cfg.Now(), cfg.Retention, rt.outputRoot()); err != nil {
			rt.log.Warn("ledger retention failed", "error", err)
		}
	}
	lifecycle.Opened(rt.self.ID)
	wctx, stop := context.WithCancel(context.Background())
	rt.stop = stop
	last, _ := st.Fingerprint()
	rt.background(wctx,
		func(ctx context.Context) { rt.watch(ctx, last) },
		func(ctx context.Context) {
			changes, unsubscribe := rt.subscribe()
			defer unsubscribe()
			rt.exec.CancelLoop(ctx, changes)
		},
		rt.exec.RenewLoop,
		rt.lines.Loop,
		rt.compactLoop)
	return rt, nil
}

// wire builds the parts that do the work, around the store and ledger.
func (rt *Runtime) wire() {
	cfg := rt.cfg
	rt.lines = held.New(rt.ledger, rt.log, rt.signal)
	rt.notices = notices.New(notices.Config{Home: cfg.Home, Now: cfg.Now, Log: rt.log, Store: rt.store, Owner: rt.self.String(),
		Addresses: cfg.NotifyAddresses, Notify: cfg.Notify, Record: rt.lines.Record})
	in := inputs.New(inputs.Options{Addresses: cfg.NotifyAddresses, Jobs: jobOutputs{rt}, SQL: cfg.SQL, Now: cfg.Now})
	rt.exec = execute.New(execute.Config{Home: cfg.Home, OutputCap: cfg.OutputCap, LeaseTTL: cfg.LeaseTTL, Now: cfg.Now, Log: rt.log,
		Store: rt.store, Ledger: rt.ledger, Runners: rt.runners, Inputs: in, Runs: rt.runs, Lines: rt.lines, Owner: rt.self.String()})
	selfStart, _ := procfs.StartTime(rt.self.PID)
	rt.lc = lifecycle.New(lifecycle.Config{Now: cfg.Now, Log: rt.log, Location: cfg.Location, LeaseTTL: cfg.LeaseTTL,
		MaxCatchUp: cfg.MaxCatchUp, Home: cfg.Home, Store: rt.store, Ledger: rt.ledger, Lines: rt.lines, Runs: rt.runs,
		Notices: rt.notices, Exec: rt.exec, Chains: chainPolicies(cfg.Chains), Self: rt.self,
		Where: runs.Where{Boot: procfs.BootID(), NS: procfs.PIDNamespace()}, SelfStart: selfStart,
		Signal: rt.signal, Subscribe: rt.subscribe, Invalid: ErrInvalidJob})
	rt.exec.SetSettler(rt.lc.Settlement)
	rt.inputs = in
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
	every(ctx, rt.cfg.WatchInterval, func() {
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
	every(ctx, store.CompactEvery, func() {
		if err := rt.store.CompactIfDue(ctx); err != nil && ctx.Err() == nil {
			rt.log.Debug("store: compaction failed; the records stay", "error", err)
		}
	})
}

// background runs each fn in a goroutine until ctx ends; Close waits for
// them (watchWG).
func (rt *Runtime) background(ctx context.Context, fns ...func(context.Context)) {
	for _, fn := range fns {
		rt.watchWG.Add(1)
		go func() {
			defer rt.watchWG.Done()
			fn(ctx)
		}()
	}
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
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
func (rt *Runtime) InFlight() int { return rt.runs.Len() }

// Close stops accepting fires and waits for runs in progress, and for their
// results to be stored. If ctx ends first, the remaining runs are stopped and
// recorded interrupted (and retried later under on_interrupt retry), and a
// result that still cannot be written (the store is not writable) is given
// up, with an error in the log: that run is found interrupted by the next
// start. Ledger lines held back by a failing disk are tried until ctx ends
// (at most 10 s more). The store is released.
func (rt *Runtime) Close(ctx context.Context) error {
	if already := rt.runs.Close(); already {
		return nil
	}
	done := make(chan struct{})
	go func() {
		rt.runs.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		rt.runs.StopWaiting(runs.ErrShutdown)
		// Stopped runs record themselves; this is bounded by the runners'
		// kill paths.
		<-done
		err = fmt.Errorf("agent: close: %w", ctx.Err())
	}
	// The notifier stops before the ledger's last flush, so its lines go
	// with the rest.
	if nerr := rt.notices.Close(); nerr != nil && err == nil {
		err = fmt.Errorf("agent: close: %w", nerr)
	}
	rt.stop()
	rt.watchWG.Wait()
	if lost := rt.lines.FlushBeforeClose(ctx); lost > 0 && err == nil {
		err = fmt.Errorf("agent: close: %d ledger lines could not be written: %w", lost, rt.lines.Failure())
	}
	lifecycle.Closed(rt.self.ID)
	if cerr := rt.store.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("agent: close: %w", cerr)
	}
	return err
}

func newJobID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "job-" + hex.EncodeToString(b[:])
}
