package job

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/internal/backoff"
)

// Duration is a time.Duration written in JSON as a Go duration string ("90s").
type Duration time.Duration

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration: %w", err)
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Misfire is what happens to slots found overdue (beyond the grace window)
// when the agent starts or wakes.
type Misfire string

// Misfire policies.
const (
	// MisfireRunOnce runs once now for the latest overdue slot and records the
	// others missed (the default).
	MisfireRunOnce Misfire = "run_once"
	// MisfireSkip records every overdue slot missed and waits for the next.
	MisfireSkip Misfire = "skip"
	// MisfireRunAll runs every overdue slot in turn, up to a bound; slots
	// beyond the bound are recorded missed.
	MisfireRunAll Misfire = "run_all"
)

// Overlap is what happens when a slot comes while a run of the same job is
// still in progress.
type Overlap string

// Overlap policies.
const (
	// OverlapSkip records the new slot skipped (the default).
	OverlapSkip Overlap = "skip"
	// OverlapQueueOne keeps the newest slot waiting and runs it when the
	// current run ends; an older waiting slot is recorded skipped.
	OverlapQueueOne Overlap = "queue_one"
	// OverlapAllow runs the new slot beside the old one.
	OverlapAllow Overlap = "allow"
	// OverlapReplace stops the current run (recorded interrupted) and runs
	// the new slot.
	OverlapReplace Overlap = "replace"
)

// Window is the idempotency window: a run that succeeded in the current
// window blocks another (recorded skipped) unless forced.
type Window string

// Idempotency windows, computed in the job's zone.
const (
	WindowNone   Window = "none"
	WindowHourly Window = "hourly"
	WindowDaily  Window = "daily"
	WindowWeekly Window = "weekly"
)

// OnInterrupt is what happens to a run whose owner died mid-run.
type OnInterrupt string

// Interrupt policies.
const (
	// InterruptRecord records the run interrupted and does not run the slot
	// again: at most once (the default).
	InterruptRecord OnInterrupt = "record"
	// InterruptRetry runs the slot again with a new fencing token, up to the
	// retry policy's attempts with backoff: at least once.
	InterruptRetry OnInterrupt = "retry"
)

// ParseMisfire validates a misfire policy name ("" is the default).
func ParseMisfire(s string) (Misfire, error) {
	switch m := Misfire(strings.TrimSpace(s)); m {
	case "":
		return MisfireRunOnce, nil
	case MisfireRunOnce, MisfireSkip, MisfireRunAll:
		return m, nil
	}
	return "", fmt.Errorf("misfire %q must be one of run_once, skip, run_all", s)
}

// ParseOverlap validates an overlap policy name ("" is the default).
func ParseOverlap(s string) (Overlap, error) {
	switch o := Overlap(strings.TrimSpace(s)); o {
	case "":
		return OverlapSkip, nil
	case OverlapSkip, OverlapQueueOne, OverlapAllow, OverlapReplace:
		return o, nil
	}
	return "", fmt.Errorf("overlap %q must be one of skip, queue_one, allow, replace", s)
}

// ParseWindow validates an idempotency window name ("" is none).
func ParseWindow(s string) (Window, error) {
	switch w := Window(strings.TrimSpace(s)); w {
	case "":
		return WindowNone, nil
	case WindowNone, WindowHourly, WindowDaily, WindowWeekly:
		return w, nil
	}
	return "", fmt.Errorf("window %q must be one of none, hourly, daily, weekly", s)
}

// ParseOnInterrupt validates an interrupt policy name ("" is record).
func ParseOnInterrupt(s string) (OnInterrupt, error) {
	switch o := OnInterrupt(strings.TrimSpace(s)); o {
	case "":
		return InterruptRecord, nil
	case InterruptRecord, InterruptRetry:
		return o, nil
	}
	return "", fmt.Errorf("on-interrupt %q must be one of record, retry", s)
}

// Repeat bounds how many runs a recurring job makes. Times 0 is unbounded.
// Completed counts the slots claimed so far.
type Repeat struct {
	Times     int `json:"times,omitempty"`
	Completed int `json:"completed"`
}

// Retry bounds re-runs of an interrupted slot under on_interrupt retry:
// at most MaxAttempts attempts in all, waiting Backoff, doubling up to
// MaxBackoff, between them.
type Retry struct {
	MaxAttempts int      `json:"max_attempts,omitempty"`
	Backoff     Duration `json:"backoff,omitempty"`
	MaxBackoff  Duration `json:"max_backoff,omitempty"`
}

// Retry defaults under on_interrupt retry.
const (
	DefaultRetryAttempts   = 3
	DefaultRetryBackoff    = 10 * time.Second
	DefaultRetryMaxBackoff = 5 * time.Minute
)

// Attempts is how many attempts r allows in all: MaxAttempts, else
// DefaultRetryAttempts.
func (r Retry) Attempts() int {
	if r.MaxAttempts > 0 {
		return r.MaxAttempts
	}
	return DefaultRetryAttempts
}

// Delay is the backoff before attempt (2, 3, ...) of a retried run.
func (r Retry) Delay(attempt int) time.Duration {
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
