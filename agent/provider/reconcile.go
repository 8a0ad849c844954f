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
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/backoff"
)

// Source is the agent side of a reconcile; *agent.Runtime implements it.
type Source interface {
	// Desired lists the enabled jobs with a future next_run_at.
	Desired(ctx context.Context) ([]agent.Desired, error)
	// Jobs lists every job (to find slots that are overdue).
	Jobs(ctx context.Context) ([]agent.Job, error)
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

// Kick records a change and asks Run for a reconcile soon; it never blocks.
// InSync is false from the moment of the call until a reconcile that
// started after it succeeds.
func (r *Reconciler) Kick() {
	r.gen.Add(1)
	r.inSync.Store(false)
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run reconciles at once, then after every signal on changes, every Kick
// and every Resync, until ctx ends. After a failure it retries on a backoff
// timer (RetryBase doubling up to RetryMax, with jitter); a success clears
// it. With ResyncInterval it also reconciles on that timer, and with the
// backstop (see ResyncInterval) when the earliest slot is overdue by more
// than its grace. The timers live in this process only: they never wake a
// stopped agent, and a reconcile that finds NAS in sync leaves InSync true
// throughout, so they do not keep an idle agent from exiting.
func (r *Reconciler) Run(ctx context.Context, changes <-chan struct{}) error {
	var (
		timer    *time.Timer
		retry    <-chan time.Time
		failures int
		resyncC  <-chan time.Time
		backstop = time.NewTimer(time.Hour)
	)
	backstop.Stop()
	defer backstop.Stop()
	if r.cfg.ResyncInterval > 0 {
		t := time.NewTicker(r.cfg.ResyncInterval)
		defer t.Stop()
		resyncC = t.C
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	armBackstop := func() {
		backstop.Stop()
		if d, ok := r.nextBackstop(ctx); ok {
			backstop.Reset(d)
		}
	}
	once := func() {
		defer armBackstop()
		if timer != nil {
			timer.Stop()
			retry = nil
		}
		if _, err := r.Reconcile(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d := r.backoff(failures)
			r.cfg.Logger.Warn("reconcile failed; retrying", "error", err, "failures", failures, "retry_in", d.String())
			timer = time.NewTimer(d)
			retry = timer.C
			return
		}
		failures = 0
	}
	once()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
			// Most writes to the job store (a run starting or ending, a
			// ledger line) leave the fires to arm as they were: those
			// cost NAS no list and no provision.
			if r.desiredUnchanged(ctx) {
				continue
			}
			r.gen.Add(1)
			r.inSync.Store(false)
			once()
		case <-r.kick:
			once()
		case <-retry:
			once()
		case <-r.resync:
			once()
		case <-resyncC:
			once()
		case <-backstop.C:
			once()
		}
	}
}

// desiredUnchanged reports whether the agent is in sync and its jobs ask
// for exactly the fires the last successful reconcile armed for, so that a
// change of the job store needs no reconcile.
func (r *Reconciler) desiredUnchanged(ctx context.Context) bool {
	if !r.inSync.Load() || r.rekey.Load() {
		return false
	}
	r.mu.Lock()
	last := r.lastDesired
	r.mu.Unlock()
	if last == nil {
		return false
	}
	d, err := r.cfg.Source.Desired(ctx)
	if err != nil {
		return false
	}
	return slices.Equal(r.withinHorizon(d, r.cfg.Now()), last)
}

// backoff returns how long Run waits after its failures-th failure in a row.
func (r *Reconciler) backoff(failures int) time.Duration {
	return backoff.Policy{Base: r.cfg.RetryBase, Max: r.cfg.RetryMax, Jitter: backoff.JitterUpperHalf}.Delay(failures)
}

// Plan is what a reconcile does, computed from the two sides.
type Plan struct {
	// Provision holds desired arms NAS lacks or holds at another time,
	// callback URL or flexible window.
	Provision []Arm `json:"provision"`
	// Cancel holds arms NAS holds that the agent does not want.
	Cancel []Arm `json:"cancel"`
	// Delivering holds past arms for the slot their job still waits for:
	// NAS is delivering them, so they are left alone.
	Delivering []Arm `json:"delivering"`
	// Unchanged holds arms that are as desired.
	Unchanged []Arm `json:"unchanged"`
	// Overdue lists jobs waiting for a past slot that NAS is not delivering:
	// the misfire policy must handle them locally.
	Overdue []Arm `json:"overdue"`
}

// InSync reports whether nothing needs doing.
func (p Plan) InSync() bool {
	return len(p.Provision) == 0 && len(p.Cancel) == 0 && len(p.Overdue) == 0
}

// Waiting returns the jobs that wait for a slot at or before now: enabled,
// not finished, with a next_run_at that has come.
func Waiting(jobs []agent.Job, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, j := range jobs {
		if j.Enabled && j.FinishedAt == nil && j.NextRunAt != nil && !j.NextRunAt.After(now) {
			out[j.ID] = *j.NextRunAt
		}
	}
	return out
}

func sameURL(a, b string) bool { return strings.TrimRight(a, "/") == strings.TrimRight(b, "/") }

// flexSeconds is a flexible window in the contract's whole seconds.
func flexSeconds(d time.Duration) int64 { return int64(d / time.Second) }

// heldFlex returns the flexible window NAS holds for armed fire a, and
// whether that is known: NAS's flex_seconds when it lists one, else the
// window the agent last provisioned for the same fire (prev, by job id).
// A fire NAS lists without flex_seconds that the agent has no record of is
// unknown: NAS may not list windows at all.
func heldFlex(a contract.ArmedJob, prev map[string]Arm) (int64, bool) {
	if a.FlexSeconds != 0 {
		return a.FlexSeconds, true
	}
	if k, ok := prev[a.JobID]; ok && k.FireAt.Equal(a.FireAt.Time) {
		return k.FlexSeconds, true
	}
	return 0, false
}

// flexDiffers reports whether armed fire a is known to hold another
// flexible window than want (seconds); an unknown window does not differ,
// so a NAS that does not list windows never causes a provision loop.
func flexDiffers(want int64, a contract.ArmedJob, prev map[string]Arm) bool {
	have, ok := heldFlex(a, prev)
	return ok && have != want
}

// ComputePlan compares desired (future fires), waiting (jobs whose slot has
// come, by job id) and armed (NAS's list) for callback at now. Desired
// fires not after now are never armed. A fire NAS lists without
// flex_seconds is taken to hold the flexible window desired: a NAS that
// does not list the window back cannot say it differs (see
// ComputePlanKnown).
func ComputePlan(desired []agent.Desired, waiting map[string]time.Time, armed []contract.ArmedJob, callback string, now time.Time) Plan {
	return ComputePlanKnown(desired, waiting, armed, nil, callback, now)
}

// ComputePlanKnown is ComputePlan with what the agent last provisioned
// (known: the state's armed set): for a fire NAS lists without
// flex_seconds at the instant known holds for its job, the window known
// records is taken as the one NAS holds, so a change of a job's window is
// provisioned even at a NAS that does not list windows, and a NAS that
// does not list them causes no provision after that.
func ComputePlanKnown(desired []agent.Desired, waiting map[string]time.Time, armed []contract.ArmedJob, known []Arm, callback string, now time.Time) Plan {
	var p Plan
	prev := make(map[string]Arm, len(known))
	for _, a := range known {
		prev[a.JobID] = a
	}
	byJob := make(map[string]contract.ArmedJob, len(armed))
	for _, a := range armed {
		byJob[a.JobID] = a
	}
	want := make(map[string]bool, len(desired))
	for _, d := range desired {
		if !d.FireAt.After(now) {
			continue
		}
		want[d.JobID] = true
		arm := Arm{JobID: d.JobID, FireAt: d.FireAt.UTC(), CallbackURL: callback, FlexSeconds: flexSeconds(d.Flex)}
		if a, ok := byJob[d.JobID]; ok && a.FireAt.Equal(d.FireAt) && sameURL(a.AgentCallbackURL, callback) && !flexDiffers(arm.FlexSeconds, a, prev) {
			arm.ScheduleID = a.ScheduleID
			p.Unchanged = append(p.Unchanged, arm)
			continue
		}
		p.Provision = append(p.Provision, arm)
	}
	for _, a := range armed {
		if want[a.JobID] {
			continue
		}
		arm := Arm{JobID: a.JobID, FireAt: a.FireAt.UTC(), ScheduleID: a.ScheduleID, CallbackURL: a.AgentCallbackURL}
		if w, ok := waiting[a.JobID]; ok && w.Equal(a.FireAt.Time) {
			p.Delivering = append(p.Delivering, arm)
			continue
		}
		p.Cancel = append(p.Cancel, arm)
	}
	for id, w := range waiting {
		if a, ok := byJob[id]; ok && a.FireAt.Equal(w) {
			continue
		}
		p.Overdue = append(p.Overdue, Arm{JobID: id, FireAt: w.UTC()})
	}
	for _, s := range [][]Arm{p.Provision, p.Cancel, p.Delivering, p.Unchanged, p.Overdue} {
		slices.SortFunc(s, func(a, b Arm) int { return strings.Compare(a.JobID, b.JobID) })
	}
	return p
}

// observation is both sides as seen at one instant.
type observation struct {
	now     time.Time
	listing nasclient.Listing
	// desired are the fires to arm (a slot beyond the horizon as its
	// refresh point); slots the jobs' real next slots.
	desired []agent.Desired
	slots   []agent.Desired
	waiting map[string]time.Time
	// jobs are the ids of every job the agent has.
	jobs map[string]bool
	plan Plan
	// known is the armed set the state recorded before (see
	// ComputePlanKnown).
	known []Arm
}

// observe compares listing with the agent's jobs; known is the armed set
// as the state last recorded it (see ComputePlanKnown).
func (r *Reconciler) observe(ctx context.Context, listing nasclient.Listing, known []Arm) (observation, error) {
	o := observation{now: r.cfg.Now(), listing: listing, known: known}
	jobs, err := r.cfg.Source.Jobs(ctx)
	if err != nil {
		return o, fmt.Errorf("provider: jobs: %w", err)
	}
	o.desired, err = r.cfg.Source.Desired(ctx)
	if err != nil {
		return o, fmt.Errorf("provider: desired: %w", err)
	}
	o.slots = o.desired
	o.desired = r.withinHorizon(o.desired, o.now)
	o.waiting = Waiting(jobs, o.now)
	o.jobs = make(map[string]bool, len(jobs))
	for _, j := range jobs {
		o.jobs[j.ID] = true
	}
	o.plan = ComputePlanKnown(o.desired, o.waiting, listing.Armed, known, r.cfg.CallbackURL, o.now)
	return o, nil
}

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

// recordFailedFires writes the failed fires NAS reported, and those kept
// from earlier attempts, to the ledger as missed, and returns the schedule
// ids that are now durably accounted for, for NAS to forget. The ledger
// takes one line per job and slot: a fire NAS reports again (its
// acknowledgement was lost, or it died again after a replay) adds nothing,
// and is acknowledged again. A fire that could not be written is not
// acknowledged (NAS lists it again) and is kept in the state too, for a NAS
// that reports each failed fire only once.
func (r *Reconciler) recordFailedFires(ctx context.Context, st *State, res *Result, reported []contract.FailedFire, fail func(op, jobID string, err error)) []string {
	all := append(st.PendingMissed, reported...)
	// One ledger write per job and slot, acknowledging every schedule id
	// reported for it.
	type slotFires struct {
		fire contract.FailedFire
		ids  []string
	}
	var order []string
	bySlot := map[string]*slotFires{}
	for _, f := range all {
		key := f.JobID + "@" + contract.FormatTime(f.FireAt.Time)
		sf := bySlot[key]
		if sf == nil {
			sf = &slotFires{fire: f}
			bySlot[key] = sf
			order = append(order, key)
		}
		if f.ScheduleID != "" && !slices.Contains(sf.ids, f.ScheduleID) {
			sf.ids = append(sf.ids, f.ScheduleID)
		}
	}
	var keep []contract.FailedFire
	var ack []string
	for _, key := range order {
		f := bySlot[key].fire
		reason := fmt.Sprintf("NAS gave up after %d attempts: %s", f.Attempts, f.Reason)
		wrote, err := r.cfg.Source.RecordMissed(ctx, f.JobID, f.FireAt.Time, reason)
		if err != nil {
			fail("record missed", f.JobID, err)
			keep = append(keep, f)
			continue
		}
		ack = append(ack, bySlot[key].ids...)
		if wrote {
			res.MissedRecorded++
			r.cfg.Logger.Warn("fire failed at NAS; recorded missed", "job_id", f.JobID, "fire_at", f.FireAt, "schedule_id", f.ScheduleID, "reason", f.Reason)
		}
	}
	if len(keep) > maxPendingMissed {
		keep = keep[len(keep)-maxPendingMissed:]
	}
	st.PendingMissed = keep
	return ack
}

// ackFailedFires tells NAS that the failed fires with these schedule ids are
// recorded, so it stops listing them. A failure is a failed step: the fires
// stay listed, and the next reconcile, finding them recorded, acknowledges
// them again. A NAS without acknowledgements needs none.
func (r *Reconciler) ackFailedFires(ctx context.Context, ids []string, fail func(op, jobID string, err error)) {
	if len(ids) == 0 {
		return
	}
	n, err := r.cfg.NAS.AckFailedFires(ctx, ids)
	switch {
	case errors.Is(err, nasclient.ErrUnsupported):
		r.cfg.Logger.Debug("NAS takes no acknowledgement of failed fires; it reports each once", "error", err)
	case err != nil:
		fail("ack failed fires", "", err)
	default:
		r.cfg.Logger.Info("failed fires acknowledged to NAS", "sent", len(ids), "acknowledged", n)
	}
}

func desiredArms(desired []agent.Desired, now time.Time, callback string) []Arm {
	out := make([]Arm, 0, len(desired))
	for _, d := range desired {
		if d.FireAt.After(now) {
			out = append(out, Arm{JobID: d.JobID, FireAt: d.FireAt.UTC(), CallbackURL: callback, FlexSeconds: flexSeconds(d.Flex)})
		}
	}
	return out
}

// Observation is both sides as a status page shows them.
type Observation struct {
	// At is the instant of the comparison.
	At time.Time `json:"at"`
	// Desired are the fires the agent wants armed; Armed what NAS holds.
	Desired []Arm `json:"desired"`
	Armed   []Arm `json:"armed"`
	// Plan is what a reconcile would do now.
	Plan Plan `json:"plan"`
	// FailedFires are the failed fires NAS reports that the agent has not
	// acknowledged yet, oldest first: the serving agent records each
	// missed and acknowledges it at its next reconcile. Observing leaves
	// them as they are.
	FailedFires []contract.FailedFire `json:"failed_fires,omitempty"`
}

// Observe lists NAS and the agent and returns what a reconcile would do. It
// is a read: it changes nothing at NAS (failed fires are reported, neither
// recorded nor acknowledged: that is the serving agent's reconcile), in the
// ledger or in the state file.
func (r *Reconciler) Observe(ctx context.Context) (Observation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	listing, err := r.cfg.NAS.List(ctx)
	if err != nil {
		return Observation{}, fmt.Errorf("provider: observe: %w", err)
	}
	out := Observation{FailedFires: listing.FailedFires}
	var known []Arm
	if r.cfg.Home != "" {
		if st, err := ReadState(r.cfg.Home); err == nil {
			known = st.Armed
		}
	}
	o, err := r.observe(ctx, listing, known)
	if err != nil {
		return Observation{}, err
	}
	out.At, out.Plan = o.now, o.plan
	out.Desired = desiredArms(o.desired, o.now, r.cfg.CallbackURL)
	out.Armed = make([]Arm, 0, len(listing.Armed))
	for _, a := range listing.Armed {
		out.Armed = append(out.Armed, Arm{JobID: a.JobID, FireAt: a.FireAt.UTC(), ScheduleID: a.ScheduleID, CallbackURL: a.AgentCallbackURL, FlexSeconds: a.FlexSeconds, Delivery: listedDelivery(a)})
	}
	slices.SortFunc(out.Armed, func(a, b Arm) int { return strings.Compare(a.JobID, b.JobID) })
	return out, nil
}
