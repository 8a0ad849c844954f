package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/inputs"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/agent/store"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/backoff"
)

// The job model lives in package store (it is what jobs.json holds); these
// aliases make it part of this package's API.
type (
	// Job is one durable job.
	Job = store.Job
	// Misfire is the misfire policy.
	Misfire = store.Misfire
	// Overlap is the overlap policy.
	Overlap = store.Overlap
	// Window is the idempotency window.
	Window = store.Window
	// OnInterrupt is the interrupt policy.
	OnInterrupt = store.OnInterrupt
	// Retry bounds retries of interrupted runs.
	Retry = store.Retry
	// Repeat bounds the number of runs.
	Repeat = store.Repeat
	// Claim is one live run of a job.
	Claim = store.Claim
	// Pending is a run owed but not started.
	Pending = store.Pending
)

// Policy values, re-exported.
const (
	MisfireRunOnce  = store.MisfireRunOnce
	MisfireSkip     = store.MisfireSkip
	MisfireRunAll   = store.MisfireRunAll
	OverlapSkip     = store.OverlapSkip
	OverlapQueueOne = store.OverlapQueueOne
	OverlapAllow    = store.OverlapAllow
	OverlapReplace  = store.OverlapReplace
	WindowNone      = store.WindowNone
	WindowHourly    = store.WindowHourly
	WindowDaily     = store.WindowDaily
	WindowWeekly    = store.WindowWeekly
	InterruptRecord = store.InterruptRecord
	InterruptRetry  = store.InterruptRetry
)

// Retry defaults under on_interrupt retry.
const (
	DefaultRetryAttempts   = 3
	DefaultRetryBackoff    = 10 * time.Second
	DefaultRetryMaxBackoff = 5 * time.Minute
)

// ErrInvalidJob wraps every validation error of a job spec.
var ErrInvalidJob = errors.New("invalid job")

// JobSpec is what a person asks for when creating a job. Empty policy fields
// take their defaults.
type JobSpec struct {
	// ID is optional; empty generates one.
	ID string
	// Name is a free label of at most 200 characters.
	Name string
	// Schedule is the schedule text (see package schedule); required.
	Schedule string
	// Timezone is an IANA zone name; empty uses the Runtime's zone.
	Timezone string
	// Repeat bounds the number of runs (0: unbounded).
	Repeat int
	// Payload is what each run does; its kind's runner validates it.
	Payload runner.Payload
	// Timeout bounds each run (0: the job sets none).
	Timeout time.Duration
	// Misfire is run_once (default), skip or run_all.
	Misfire string
	// Grace is how late a slot may still run as scheduled (0: see the Grace
	// function).
	Grace time.Duration
	// Flex is the flexible window: the slot's fire may be delivered up to
	// Flex after it and still runs as the slot (0: none). Whole seconds, at
	// most MaxFlex, and shorter than the schedule's period.
	Flex time.Duration
	// Overlap is skip (default), queue_one, allow or replace.
	Overlap string
	// Window is the idempotency window: none (default), hourly, daily or
	// weekly.
	Window string
	// OnInterrupt is record (default) or retry.
	OnInterrupt string
	// Retry bounds re-runs under on_interrupt retry; zero fields take the
	// Default retry constants.
	Retry Retry
	// Paused creates the job paused, with PausedReason.
	Paused       bool
	PausedReason string
	// Notify is who hears of the job's runs, and when a failing streak
	// alerts (package notify).
	Notify notify.Policy
	// JobKind is plain (default), workflow or fanout, with its settings in
	// Workflow or Fanout.
	JobKind  string
	Workflow *store.Workflow
	Fanout   *store.Fanout
}

// newJob validates spec and builds the job created at now. reg validates the
// payload. It returns the parsed schedule too.
func newJob(spec JobSpec, now time.Time, env jobEnv) (*Job, *schedule.Schedule, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidJob, fmt.Sprintf(format, args...))
	}
	// invalid keeps err in the chain, so callers can still ask errors.Is
	// about the cause.
	invalid := func(err error) error {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	j := &Job{
		ID:           strings.TrimSpace(spec.ID),
		Name:         strings.TrimSpace(spec.Name),
		Schedule:     strings.TrimSpace(spec.Schedule),
		Timezone:     strings.TrimSpace(spec.Timezone),
		Enabled:      !spec.Paused,
		PausedReason: spec.PausedReason,
		Repeat:       Repeat{Times: spec.Repeat},
		Payload:      spec.Payload,
		Timeout:      store.Duration(spec.Timeout),
		Grace:        store.Duration(spec.Grace),
		Flex:         store.Duration(spec.Flex),
		Retry:        spec.Retry,
		Policy:       spec.Notify,
		CreatedAt:    now.UTC().Truncate(time.Second),
	}
	j.UpdatedAt = j.CreatedAt
	if j.ID == "" {
		j.ID = newJobID()
	}
	if err := store.ValidJobID(j.ID); err != nil {
		return nil, nil, invalid(err)
	}
	if err := j.CheckText(); err != nil {
		return nil, nil, invalid(err)
	}
	if len(j.Name) > 200 {
		return nil, nil, bad("name is longer than 200 characters")
	}
	if j.Schedule == "" {
		return nil, nil, bad("schedule is empty")
	}
	if err := setPolicies(j, spec); err != nil {
		return nil, nil, err
	}
	if j.Timezone != "" {
		if _, err := time.LoadLocation(j.Timezone); err != nil || j.Timezone == "Local" {
			return nil, nil, bad("unknown time zone %q", j.Timezone)
		}
	}
	if err := env.check(j); err != nil {
		return nil, nil, invalid(err)
	}
	if err := env.checkKind(j, spec); err != nil {
		return nil, nil, invalid(err)
	}
	sched, err := parseSchedule(j, env.loc)
	if err != nil {
		return nil, nil, invalid(err)
	}
	j.Kind = string(sched.Kind())
	if p := sched.Period(); j.Flex > 0 && p > 0 && j.Flex.Std() >= p {
		// A window reaching the next slot would have NAS deliver a slot
		// after its successor has come: it would be judged overdue.
		return nil, nil, bad("flex %s must be shorter than the schedule's period of %s", j.Flex.Std(), p)
	}
	if j.Timezone != "" && sched.Location().String() != j.Timezone {
		// The job's zone also sets its idempotency windows: one job, one zone.
		return nil, nil, bad("time zone %q conflicts with the schedule's own zone %q; give one of them", j.Timezone, sched.Location().String())
	}
	if j.Timezone == "" {
		j.Timezone = sched.Location().String()
	}
	next, ok := sched.Next(now)
	if !ok {
		return nil, nil, bad("schedule %q has no fire after %s", j.Schedule, now.UTC().Format(time.RFC3339))
	}
	if j.Enabled {
		j.NextRunAt = utcPtr(next)
	} else {
		j.NextRunAt = nil
	}
	return j, sched, nil
}

// jobEnv is what a job is built and checked against: the runtime's zone,
// its runners and its notification address policy.
type jobEnv struct {
	loc    *time.Location
	reg    *runner.Registry
	notify notify.ValidateOptions
	inputs *inputs.Set
}

// check validates j's payload with its runner and its notification policy.
func (e jobEnv) check(j *Job) error {
	if e.reg != nil {
		if err := e.reg.Validate(j.Payload); err != nil {
			return fmt.Errorf("payload: %w", err)
		}
	}
	return j.Policy.Validate(context.Background(), e.notify)
}

// setPolicies parses spec's policies into j, with the retry defaults under
// on_interrupt retry.
func setPolicies(j *Job, spec JobSpec) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidJob, fmt.Sprintf(format, args...))
	}
	invalid := func(err error) error {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if spec.Repeat < 0 {
		return bad("repeat %d must not be negative", spec.Repeat)
	}
	if spec.Timeout < 0 {
		return bad("timeout %s must not be negative", spec.Timeout)
	}
	if spec.Grace < 0 {
		return bad("grace %s must not be negative", spec.Grace)
	}
	if err := CheckFlex(spec.Flex); err != nil {
		return invalid(err)
	}
	var err error
	if j.Misfire, err = store.ParseMisfire(spec.Misfire); err != nil {
		return invalid(err)
	}
	if j.Overlap, err = store.ParseOverlap(spec.Overlap); err != nil {
		return invalid(err)
	}
	if j.Window, err = store.ParseWindow(spec.Window); err != nil {
		return invalid(err)
	}
	if j.OnInterrupt, err = store.ParseOnInterrupt(spec.OnInterrupt); err != nil {
		return invalid(err)
	}
	if j.Retry.MaxAttempts < 0 || j.Retry.Backoff < 0 || j.Retry.MaxBackoff < 0 {
		return bad("retry values must not be negative")
	}
	if j.OnInterrupt == InterruptRetry {
		if j.Retry.MaxAttempts == 0 {
			j.Retry.MaxAttempts = DefaultRetryAttempts
		}
		if j.Retry.Backoff == 0 {
			j.Retry.Backoff = store.Duration(DefaultRetryBackoff)
		}
		if j.Retry.MaxBackoff == 0 {
			j.Retry.MaxBackoff = store.Duration(DefaultRetryMaxBackoff)
		}
	}
	return nil
}

func utcPtr(t time.Time) *time.Time {
	u := t.UTC()
	return &u
}

// parseSchedule parses the job's schedule in its zone (or defLoc), anchored
// at its creation.
func parseSchedule(j *Job, defLoc *time.Location) (*schedule.Schedule, error) {
	loc := defLoc
	if loc == nil {
		loc = time.UTC
	}
	if j.Timezone != "" {
		l, err := time.LoadLocation(j.Timezone)
		if err != nil {
			return nil, fmt.Errorf("job %s: zone: %w", j.ID, err)
		}
		loc = l
	}
	s, err := schedule.Parse(j.Schedule, schedule.Options{Location: loc, Anchor: j.CreatedAt})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// MaxFlex is the widest flexible window a job may have: one day, NAS's
// contract.MaxFlexSeconds.
const MaxFlex = contract.MaxFlexSeconds * time.Second

// CheckFlex checks a flexible window: 0 (none) or whole seconds up to
// MaxFlex.
func CheckFlex(d time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("flex %s must not be negative", d)
	case d > MaxFlex:
		return fmt.Errorf("flex %s is longer than the most of %s", d, MaxFlex)
	case d%time.Second != 0:
		return fmt.Errorf("flex %s must be whole seconds", d)
	}
	return nil
}

// Tolerance returns how late a fire for a slot of job j (schedule s) may
// come and still count as on time: the end of j's flexible window plus its
// misfire grace (see Grace). It is what misfire skip, the catch-up of
// overdue slots and the backstop measure a slot's lateness against.
func Tolerance(j *Job, s *schedule.Schedule) time.Duration {
	return j.Flex.Std() + Grace(j, s)
}

// Grace returns the misfire grace window of a job with schedule s: the job's
// own if set, else half the period clamped to [2 min, 2 h].
func Grace(j *Job, s *schedule.Schedule) time.Duration {
	if j.Grace > 0 {
		return j.Grace.Std()
	}
	g := s.Period() / 2
	if g < 2*time.Minute {
		g = 2 * time.Minute
	}
	if g > 2*time.Hour {
		g = 2 * time.Hour
	}
	return g
}

// WindowKey names the idempotency window t falls in, in loc: "2026-01-29T09"
// (hourly), "2026-01-29" (daily), "2026-W05" (weekly, ISO), "" for none.
func WindowKey(w Window, t time.Time, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	switch w {
	case WindowHourly:
		return lt.Format("2006-01-02T15")
	case WindowDaily:
		return lt.Format("2006-01-02")
	case WindowWeekly:
		y, wk := lt.ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, wk)
	}
	return ""
}

// retryDelay is the backoff before attempt (2, 3, ...) of a retried run.
func retryDelay(r Retry, attempt int) time.Duration {
	d := r.Backoff.Std()
	if d <= 0 {
		d = DefaultRetryBackoff
	}
	maxB := r.MaxBackoff.Std()
	if maxB <= 0 {
		maxB = DefaultRetryMaxBackoff
	}
	// Attempt 2 waits the first step; a max below the backoff caps it.
	return min(backoff.Policy{Base: d, Max: maxB}.Delay(attempt-1), maxB)
}

func maxAttempts(j *Job) int {
	if j.Retry.MaxAttempts > 0 {
		return j.Retry.MaxAttempts
	}
	return DefaultRetryAttempts
}
