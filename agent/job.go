package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/inputs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/contract"
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
	Retry job.Retry
	// Paused creates the job paused, with PausedReason.
	Paused       bool
	PausedReason string
	// Notify is who hears of the job's runs, and when a failing streak
	// alerts (package notify).
	Notify notify.Policy
	// JobKind is plain (default), workflow or fanout, with its settings in
	// Workflow or Fanout.
	JobKind  string
	Workflow *job.Workflow
	Fanout   *job.Fanout
}

// newJob validates spec and builds the job created at now. reg validates the
// payload. It returns the parsed schedule too.
func newJob(spec JobSpec, now time.Time, env jobEnv) (*job.Job, *schedule.Schedule, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidJob, fmt.Sprintf(format, args...))
	}
	// invalid keeps err in the chain, so callers can still ask errors.Is
	// about the cause.
	invalid := func(err error) error {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	j := &job.Job{
		ID:           strings.TrimSpace(spec.ID),
		Name:         strings.TrimSpace(spec.Name),
		Schedule:     strings.TrimSpace(spec.Schedule),
		Timezone:     strings.TrimSpace(spec.Timezone),
		Enabled:      !spec.Paused,
		PausedReason: spec.PausedReason,
		Repeat:       job.Repeat{Times: spec.Repeat},
		Payload:      spec.Payload,
		Timeout:      job.Duration(spec.Timeout),
		Grace:        job.Duration(spec.Grace),
		Flex:         job.Duration(spec.Flex),
		Retry:        spec.Retry,
		Policy:       spec.Notify,
		CreatedAt:    now.UTC().Truncate(time.Second),
	}
	j.UpdatedAt = j.CreatedAt
	if j.ID == "" {
		j.ID = newJobID()
	}
	if err := job.ValidID(j.ID); err != nil {
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
	sched, err := job.ParseSchedule(j, env.loc)
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
func (e jobEnv) check(j *job.Job) error {
	if e.reg != nil {
		if err := e.reg.Validate(j.Payload); err != nil {
			return fmt.Errorf("payload: %w", err)
		}
	}
	return j.Policy.Validate(context.Background(), e.notify)
}

// setPolicies parses spec's policies into j, with the retry defaults under
// on_interrupt retry.
func setPolicies(j *job.Job, spec JobSpec) error {
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
	if j.Misfire, err = job.ParseMisfire(spec.Misfire); err != nil {
		return invalid(err)
	}
	if j.Overlap, err = job.ParseOverlap(spec.Overlap); err != nil {
		return invalid(err)
	}
	if j.Window, err = job.ParseWindow(spec.Window); err != nil {
		return invalid(err)
	}
	if j.OnInterrupt, err = job.ParseOnInterrupt(spec.OnInterrupt); err != nil {
		return invalid(err)
	}
	if j.Retry.MaxAttempts < 0 || j.Retry.Backoff < 0 || j.Retry.MaxBackoff < 0 {
		return bad("retry values must not be negative")
	}
	if j.OnInterrupt == job.InterruptRetry {
		if j.Retry.MaxAttempts == 0 {
			j.Retry.MaxAttempts = job.DefaultRetryAttempts
		}
		if j.Retry.Backoff == 0 {
			j.Retry.Backoff = job.Duration(job.DefaultRetryBackoff)
		}
		if j.Retry.MaxBackoff == 0 {
			j.Retry.MaxBackoff = job.Duration(job.DefaultRetryMaxBackoff)
		}
	}
	return nil
}

func utcPtr(t time.Time) *time.Time {
	u := t.UTC()
	return &u
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
