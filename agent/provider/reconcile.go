package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/contract"
)

// Source is the agent side of a reconcile; *agent.Runtime implements it.
type Source interface {
	// Desired lists the enabled jobs with a future next_run_at.
	Desired(ctx context.Context) ([]agent.Desired, error)
	// Jobs lists every job (to find slots that are overdue).
	Jobs(ctx context.Context) ([]job.Job, error)
	// CatchUp applies the misfire policy to overdue slots.
	CatchUp(ctx context.Context) error
	// RecordMissed writes a fire NAS gave up on to the ledger as missed,
	// once per job and slot; it reports whether it wrote the line (false when
	// the slot was already accounted for). A nil error means it is durable.
	RecordMissed(ctx context.Context, jobID string, slot time.Time, reason string) (bool, error)
}

var _ Source = (*agent.Runtime)(nil)

// NAS is the NAS side of a reconcile; *nasclient.Client implements it.
type NAS interface {
	List(ctx context.Context) (nasclient.Listing, error)
	Provision(ctx context.Context, req contract.ProvisionRequest) (contract.ProvisionResponse, error)
	Cancel(ctx context.Context, jobID string) error
	// AckFailedFires tells NAS the failed fires with these schedule ids are
	// recorded; an error wrapping nasclient.ErrUnsupported means NAS has no
	// such call (it reports each failed fire once).
	AckFailedFires(ctx context.Context, scheduleIDs []string) (int, error)
}

var _ NAS = (*nasclient.Client)(nil)

// Defaults of ReconcilerConfig.
const (
	DefaultRetryBase = time.Second
	DefaultRetryMax  = 5 * time.Minute
)

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	// Source and NAS are the two sides. Required.
	Source Source
	NAS    NAS
	// CallbackURL is sent with every provision (cron.chronos.callback_url).
	CallbackURL string
	// Home is where the state file lives; empty keeps no state.
	Home string
	// By names this process in the state file ("agent" or "cli").
	By string
	// CatchUp lets the reconciler hand overdue slots that NAS is not
	// delivering to Source.CatchUp. Only the serving agent sets it: a CLI
	// must not run jobs.
	CatchUp bool
	// RetryBase and RetryMax bound the backoff of Run after a failure
	// (exponential with jitter); defaults 1 s and 5 min.
	RetryBase, RetryMax time.Duration
	// ResyncInterval makes Run reconcile on a timer too, so that a fire
	// that never arrives is noticed while the agent is awake
	// (cron.chronos.resync_interval); 0 disables it. With CatchUp and a
	// Source that is a Healer, Run also wakes when the earliest slot is
	// overdue by more than its grace (the backstop).
	ResyncInterval time.Duration
	// Horizon is the furthest ahead a fire is armed; a slot beyond it is
	// armed as a refresh fire (see RefreshPoint). Default DefaultHorizon.
	Horizon time.Duration
	// Delivery is the delivery mode provisions ask for
	// (cron.chronos.delivery): contract.DeliveryDirect, or ""/
	// contract.DeliveryNAS for NAS-mediated delivery. See direct.go.
	Delivery string
	// Keys keeps the jobs' cron keys; default the key store of Home (none
	// without a Home, which direct delivery needs).
	Keys *cronkeys.Store
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Reconciler keeps NAS's armed set equal to the agent's desired set.
type Reconciler struct {
	cfg    ReconcilerConfig
	mu     sync.Mutex
	kick   chan struct{}
	resync chan struct{}
	// horizon is the effective Horizon: halved when NAS refuses a fire as
	// too far ahead.
	horizon atomic.Int64

	inSync atomic.Bool
	// rekey asks the next reconcile to provision every direct job again.
	rekey atomic.Bool
	// rekeyJobs are the jobs the reconcile in progress re-keys (under mu).
	rekeyJobs map[string]bool
	gen       atomic.Int64 // bumped by every change; a reconcile that saw an older one is not in sync
	failures  atomic.Int64
	runs      atomic.Int64
	// lastDesired is what the last reconcile that succeeded armed for (the
	// desired fires within the horizon); nil before one, or after a
	// failure (under mu).
	lastDesired []agent.Desired
}

// NewReconciler returns a reconciler for cfg.
func NewReconciler(cfg ReconcilerConfig) (*Reconciler, error) {
	if cfg.Source == nil || cfg.NAS == nil {
		return nil, errors.New("provider: reconciler needs a Source and a NAS")
	}
	if cfg.CallbackURL == "" {
		return nil, errors.New("provider: reconciler needs a callback URL")
	}
	if cfg.By == "" {
		cfg.By = "agent"
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = DefaultRetryBase
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = DefaultRetryMax
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.ResyncInterval < 0 {
		return nil, errors.New("provider: ResyncInterval must not be negative")
	}
	if err := cfg.openKeys(); err != nil {
		return nil, err
	}
	r := &Reconciler{cfg: cfg, kick: make(chan struct{}, 1), resync: make(chan struct{}, 1)}
	r.horizon.Store(int64(cfg.Horizon))
	return r, nil
}

// InSync reports whether the last reconcile succeeded and no change has
// arrived since (through Kick or Run's changes channel): NAS holds what the
// agent wants, so the process may stop.
func (r *Reconciler) InSync() bool { return r.inSync.Load() }

// Failures returns how many reconciles of this process failed.
func (r *Reconciler) Failures() int64 { return r.failures.Load() }

// Reconciles returns how many reconciles this process ran.
func (r *Reconciler) Reconciles() int64 { return r.runs.Load() }

// Reconcile runs one reconcile: list NAS (one call, everything), record the
// failed fires it reports and then acknowledge them to NAS, hand overdue
// slots NAS is not delivering to the misfire
// policy (when CatchUp is set), then provision and cancel per the plan. Every
// step is attempted; the error joins the failures. The result and counters
// are written to the state file.
func (r *Reconciler) Reconcile(ctx context.Context) (Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// InSync stays as it is while NAS is compared: a reconcile that finds
	// it in sync (a resync) must not make an idle agent look busy. It drops
	// as soon as something is to be done, and on any failure.
	gen := r.gen.Load()
	r.runs.Add(1)
	start := r.cfg.Now()
	res := Result{At: start, By: r.cfg.By}
	st := State{}
	if r.cfg.Home != "" {
		unlock, err := lockFile(ctx, filepath.Join(r.cfg.Home, stateLock))
		if err != nil {
			return res, err
		}
		defer unlock()
		if st, err = ReadState(r.cfg.Home); errors.Is(err, ErrCorruptState) {
			st = State{}
		} else if err != nil {
			return res, err
		}
	}
	var errs []error
	fail := func(op, jobID string, err error) {
		errs = append(errs, err)
		st.addError(r.cfg.Now(), op, jobID, err)
		if ctx.Err() != nil {
			// Cut short because the agent is stopping: the next start
			// reconciles again, so this is no warning.
			r.cfg.Logger.Debug("reconcile step cut short", "op", op, "job_id", jobID, "error", err)
			return
		}
		r.cfg.Logger.Warn("reconcile step failed", "op", op, "job_id", jobID, "error", err)
	}
	o, armedAfter := r.reconcile(ctx, &st, &res, fail)
	if o == nil && ctx.Err() != nil {
		// Cut short by the agent stopping before NAS was even listed:
		// nothing was observed or changed, so the last reconcile on record
		// (and what status reports of it) stays the one that ran whole.
		return res, fmt.Errorf("provider: reconcile cut short: %w", errors.Join(append(errs, ctx.Err())...))
	}
	r.lastDesired = nil
	if o != nil {
		if len(errs) == 0 {
			r.lastDesired = slices.Clone(o.desired)
			if r.lastDesired == nil {
				r.lastDesired = []agent.Desired{}
			}
		}
		st.Desired = desiredArms(o.desired, o.now, r.cfg.CallbackURL)
		st.Armed = armedAfter
		res.Desired, res.Armed = len(st.Desired), len(st.Armed)
	}
	res.DurationMS = r.cfg.Now().Sub(start).Milliseconds()
	res.OK = len(errs) == 0
	err := errors.Join(errs...)
	if err != nil {
		r.inSync.Store(false)
		res.Error = err.Error()
		r.failures.Add(1)
		st.Counts.Failures++
	} else {
		at := res.At
		st.LastSuccessAt = &at
	}
	st.Counts.Reconciles++
	st.Counts.Provisioned += len(res.Provisioned)
	st.Counts.Cancelled += len(res.Cancelled)
	st.Counts.MissedRecorded += res.MissedRecorded
	st.Last = &res
	st.UpdatedAt = r.cfg.Now()
	if r.cfg.Home != "" {
		if werr := writeState(r.cfg.Home, st); werr != nil {
			r.cfg.Logger.Warn("writing the provider state failed", "error", werr)
		}
	}
	if err == nil {
		// A change that arrived meanwhile keeps it out of sync until the
		// reconcile it asked for.
		r.inSync.Store(r.gen.Load() == gen)
		// A reconcile that changed nothing at NAS or in the ledger is
		// routine: it is logged at debug.
		level := slog.LevelDebug
		if len(res.Provisioned) > 0 || len(res.Cancelled) > 0 || res.MissedRecorded > 0 || res.CaughtUp {
			level = slog.LevelInfo
		}
		r.cfg.Logger.Log(ctx, level, "reconciled", "desired", res.Desired, "armed", res.Armed,
			"provisioned", len(res.Provisioned), "cancelled", len(res.Cancelled), "delivering", len(res.Delivering))
		return res, nil
	}
	return res, fmt.Errorf("provider: reconcile: %w", err)
}

// reconcile does the work of Reconcile; it returns the last observation (nil
// when NAS could not be listed) and the armed set after the changes.
func (r *Reconciler) reconcile(ctx context.Context, st *State, res *Result, fail func(op, jobID string, err error)) (*observation, []Arm) {
	listing, err := r.cfg.NAS.List(ctx)
	if err != nil {
		fail("list", "", err)
		if h, ok := r.healer(); ok {
			// NAS cannot say what it will deliver: slots overdue beyond
			// their grace are run by the misfire policy (the backstop).
			r.backstopUnreachable(ctx, h, err, res, fail)
		} else if r.cfg.CatchUp {
			// NAS cannot say what it will deliver; the local misfire policy
			// keeps overdue slots from being lost.
			r.catchUpIfWaiting(ctx, res, fail)
		}
		return nil, nil
	}
	r.ackFailedFires(ctx, r.recordFailedFires(ctx, st, res, listing.FailedFires, fail), fail)

	o, err := r.observe(ctx, listing, st.Armed)
	if err != nil {
		fail("observe", "", err)
		return nil, nil
	}
	if !o.plan.InSync() {
		r.inSync.Store(false)
	}
	if h, ok := r.healer(); ok {
		if r.heal(ctx, h, &o, res, fail) {
			r.inSync.Store(false)
			if o, err = r.observe(ctx, listing, st.Armed); err != nil {
				fail("observe", "", err)
				return nil, nil
			}
		}
	} else if r.cfg.CatchUp && len(o.plan.Overdue) > 0 {
		if err := r.cfg.Source.CatchUp(ctx); err != nil {
			fail("catch up", "", err)
		} else {
			res.CaughtUp = true
			if o, err = r.observe(ctx, listing, st.Armed); err != nil {
				fail("observe", "", err)
				return nil, nil
			}
		}
	}
	r.planDelivery(ctx, listing, &o, fail)
	return &o, r.apply(ctx, listing, o, res, fail)
}

// apply provisions and cancels per o's plan and returns the armed set
// after the changes.
func (r *Reconciler) apply(ctx context.Context, listing nasclient.Listing, o observation, res *Result, fail func(op, jobID string, err error)) []Arm {
	prev := make(map[string]Arm, len(o.known))
	for _, a := range o.known {
		prev[a.JobID] = a
	}
	armed := map[string]Arm{}
	for _, a := range listing.Armed {
		// The window NAS holds as far as it is known: a NAS that does not
		// list windows keeps the one last provisioned on record.
		flex, _ := heldFlex(a, prev)
		armed[a.JobID] = Arm{JobID: a.JobID, FireAt: a.FireAt.UTC(), ScheduleID: a.ScheduleID, CallbackURL: a.AgentCallbackURL, FlexSeconds: flex, Delivery: listedDelivery(a)}
	}
	slots := map[string]time.Time{}
	for _, d := range o.slots {
		slots[d.JobID] = d.FireAt
	}
	for _, p := range o.plan.Provision {
		out, err := r.provisionKeyed(ctx, &p, slots[p.JobID])
		if err != nil {
			fail("provision", p.JobID, err)
			if r.rekeying(p.JobID) {
				r.rekey.Store(true) // the next reconcile re-keys again
			}
			continue
		}
		p.ScheduleID, p.Delivery = out.ScheduleID, answeredDelivery(out)
		armed[p.JobID] = p
		res.Provisioned = append(res.Provisioned, p.JobID)
	}
	for _, c := range o.plan.Cancel {
		// The job's keys go at once, whatever NAS answers: a fire of a
		// cancelled job is not run.
		if err := r.dropKeys(ctx, c.JobID); err != nil {
			fail("drop cron key", c.JobID, err)
		}
		if err := r.cfg.NAS.Cancel(ctx, c.JobID); err != nil {
			fail("cancel", c.JobID, err)
			continue
		}
		delete(armed, c.JobID)
		res.Cancelled = append(res.Cancelled, c.JobID)
	}
	for _, d := range o.plan.Delivering {
		res.Delivering = append(res.Delivering, d.JobID)
	}
	if !r.cfg.CatchUp {
		for _, w := range o.plan.Overdue {
			r.cfg.Logger.Info("slot overdue and not armed; the agent's misfire policy handles it when it runs", "job_id", w.JobID, "fire_at", w.FireAt)
		}
	}
	out := make([]Arm, 0, len(armed))
	for _, a := range armed {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Arm) int { return strings.Compare(a.JobID, b.JobID) })
	return out
}

func (r *Reconciler) catchUpIfWaiting(ctx context.Context, res *Result, fail func(op, jobID string, err error)) {
	jobs, err := r.cfg.Source.Jobs(ctx)
	if err != nil {
		fail("jobs", "", err)
		return
	}
	if len(Waiting(jobs, r.cfg.Now())) == 0 {
		return
	}
	if err := r.cfg.Source.CatchUp(ctx); err != nil {
		fail("catch up", "", err)
		return
	}
	res.CaughtUp = true
}
