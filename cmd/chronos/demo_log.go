package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
)

// The demo's live log: one human line per step of each fire, with the time
// relative to the start of the demo. Components keep logging through
// log/slog as they always do; each gets a logger whose handler
// (observeHandler) hands the records to the demoLog, which turns the stable
// log messages and keys it knows into steps and prints warnings and errors
// it does not know as they are.

// Steps of a fire, in the order they normally happen.
const (
	stepArmed    = "armed"
	stepRelayed  = "relayed"
	stepVerified = "token verified"
	stepClaimed  = "claimed"
	stepRan      = "ran"
	stepRearmed  = "re-armed"
)

// demoLog prints steps and keeps what the summary needs. It is safe for
// concurrent use.
type demoLog struct {
	start time.Time
	now   func() time.Time

	mu      sync.Mutex
	w       io.Writer
	fired   map[string]bool      // jobs that have been claimed at least once
	started map[string]time.Time // run id → run started
	first   time.Duration        // time of the first "ran", 0 before
	// ranDetail, when set, describes a finished run from the ledger and its
	// output (exit code, output snippet).
	ranDetail func(jobID, runID string) string
}

func newDemoLog(w io.Writer, start time.Time) *demoLog {
	return &demoLog{start: start, now: time.Now, w: w, fired: map[string]bool{}, started: map[string]time.Time{}}
}

// step prints one step line: +T  JOB  STEP  detail.
func (d *demoLog) step(job, step, detail string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.printLocked(job, step, detail)
}

func (d *demoLog) printLocked(job, step, detail string) {
	rel := d.now().Sub(d.start).Seconds()
	if job == "" {
		job = "-"
	}
	fmt.Fprintf(d.w, "%+9.3fs  %-10s %-15s %s\n", rel, job, step, detail)
}

// header prints a line of the banner, unindented by the time column.
func (d *demoLog) header(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, format+"\n", args...)
}

// markFired records that job has had a claim: its next arm is a re-arm.
func (d *demoLog) markFired(job string) {
	d.mu.Lock()
	d.fired[job] = true
	d.mu.Unlock()
}

// armStep names an arm of job: armed the first time, re-armed after a fire.
func (d *demoLog) armStep(job string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fired[job] {
		return stepRearmed
	}
	return stepArmed
}

// firstRun returns when the first run ended, relative to start (0: none yet).
func (d *demoLog) firstRun() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.first
}

// observe turns one log record of a component into a step, a note, or
// nothing. a holds the record's attributes and the logger's.
func (d *demoLog) observe(component string, level slog.Level, msg string, a attrs) {
	job := a.str("job_id")
	switch {
	case component == "nas" && msg == "armed":
		at, _ := a.time("fire_at")
		step := d.armStep(job)
		d.step(job, step, fmt.Sprintf("fire_at %s (in %s)  schedule %s", clock(at), roundDur(at.Sub(d.now())), a.str("schedule_id")))
	case component == "nas" && msg == "cancelled":
		d.step(job, "cancelled", "NAS removed the armed one-shot")
	case component == "nas" && msg == "fire dropped":
		d.step(job, "dropped", "NAS: "+a.str("reason"))
	case component == "nas" && msg == "relay duplicate":
		d.step(job, "duplicate", "NAS: this delivery was already handled")
	case component == "nas" && msg == "fire rejected":
		d.step(job, "rejected", "agent refused the fire: "+a.str("reason"))
	case component == "nas" && msg == "fire not taken; relay retries":
		d.step(job, "retry", "agent not reachable: "+a.str("reason"))
	case component == "nas" && msg == "fire delivered":
		// The agent's own steps say this better.
	case component == "agenthttp" && msg == "fire accepted":
		d.markFired(job)
		what := "run " + a.str("run_id")
		if at, ok := a.time("fire_at"); ok {
			what += fmt.Sprintf(" (claimed %s after fire_at)", roundDur(d.now().Sub(at)))
		}
		if a.str("skipped") == "true" {
			what = "slot consumed without a run: " + a.str("reason")
		}
		d.step(job, stepClaimed, what)
	case component == "agenthttp" && msg == "fire duplicate":
		d.step(job, "duplicate", "slot already claimed: "+a.str("reason"))
	case component == "agenthttp" && msg == "fire for an unknown job":
		d.step(job, "gone", "the agent has no such job")
	case component == "agenthttp" && msg == "fire rejected":
		d.step(job, "token refused", a.str("error"))
	case component == "agenthttp" && msg == "fire deferred":
		d.step(job, "retry", "the agent cannot claim now: "+a.str("reason"))
	case component == "agent" && msg == "run started":
		d.mu.Lock()
		d.started[a.str("run_id")] = d.now()
		d.mu.Unlock()
	case component == "agent" && msg == "run ended":
		runID := a.str("run_id")
		d.mu.Lock()
		began, ok := d.started[runID]
		delete(d.started, runID)
		detail := a.str("state")
		if ok {
			detail += " in " + roundDur(d.now().Sub(began))
		}
		if d.ranDetail != nil {
			if more := d.ranDetail(job, runID); more != "" {
				detail += ", " + more
			}
		}
		if r := a.str("reason"); r != "" && a.str("state") != "succeeded" {
			detail += " (" + r + ")"
		}
		if d.first == 0 {
			d.first = d.now().Sub(d.start)
		}
		d.printLocked(job, stepRan, detail)
		d.mu.Unlock()
	case level >= slog.LevelWarn:
		d.step(job, strings.ToLower(level.String()), component+": "+msg+a.rest("job_id"))
	}
}

// clock formats an instant as a wall-clock time in UTC with milliseconds.
func clock(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return t.UTC().Format("15:04:05.000Z")
}

// roundDur rounds d for people: milliseconds below ten seconds.
func roundDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + roundDur(-d)
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

// attrs are the attributes of one record, flattened (groups joined by dots).
type attrs map[string]slog.Value

func (a attrs) str(k string) string {
	v, ok := a[k]
	if !ok {
		return ""
	}
	return v.Resolve().String()
}

// time reads an attribute that is a time.Time or an RFC 3339 string.
func (a attrs) time(k string) (time.Time, bool) {
	v, ok := a[k]
	if !ok {
		return time.Time{}, false
	}
	v = v.Resolve()
	if v.Kind() == slog.KindTime {
		return v.Time(), true
	}
	if v.Kind() == slog.KindAny {
		if t, ok := v.Any().(fmt.Stringer); ok {
			if p, err := time.Parse(time.RFC3339Nano, t.String()); err == nil {
				return p, true
			}
		}
	}
	t, err := time.Parse(time.RFC3339Nano, v.String())
	return t, err == nil
}

// rest formats the attributes other than skip as " k=v ...", sorted.
func (a attrs) rest(skip ...string) string {
	keys := make([]string, 0, len(a))
outer:
	for k := range a {
		for _, s := range skip {
			if k == s {
				continue outer
			}
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, a[k].Resolve().String())
	}
	return b.String()
}

// observeHandler is a slog.Handler that passes every record at or above
// Info to a demoLog, tagged with the component that logged it.
type observeHandler struct {
	log       *demoLog
	component string
	attrs     []slog.Attr
	group     string
}

var _ slog.Handler = (*observeHandler)(nil)

// newObserveLogger returns a logger for component whose records feed d.
func newObserveLogger(d *demoLog, component string) *slog.Logger {
	return slog.New(&observeHandler{log: d, component: component})
}

// Enabled implements slog.Handler.
func (h *observeHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

// Handle implements slog.Handler.
func (h *observeHandler) Handle(_ context.Context, r slog.Record) error {
	a := attrs{}
	for _, at := range h.attrs {
		flatten(a, "", at)
	}
	r.Attrs(func(at slog.Attr) bool {
		flatten(a, h.group, at)
		return true
	})
	h.log.observe(h.component, r.Level, r.Message, a)
	return nil
}

func flatten(a attrs, prefix string, at slog.Attr) {
	v := at.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if at.Key != "" {
			p += at.Key + "."
		}
		for _, g := range v.Group() {
			flatten(a, p, g)
		}
		return
	}
	a[prefix+at.Key] = v
}

// WithAttrs implements slog.Handler.
func (h *observeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, at := range as {
		if h.group != "" {
			at = slog.Attr{Key: strings.TrimSuffix(h.group, ".") + "." + at.Key, Value: at.Value}
		}
		c.attrs = append(c.attrs, at)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *observeHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}
