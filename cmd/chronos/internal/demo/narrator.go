package demo

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// The demo's live narration: one human line per step of each fire, with the
// time relative to the start of the demo. Components keep logging through
// log/slog as they always do; each side (NAS, its dispatcher, the agent)
// gets a logger whose handler (observeHandler) hands the records to the
// narrator, which turns the stable log messages and keys it knows into steps
// and prints warnings and errors it does not know as they are.

// Steps of a fire, in the order they normally happen.
const (
	stepArmed    = "armed"
	stepRelayed  = "relayed"
	stepVerified = "token verified"
	stepClaimed  = "claimed"
	stepRan      = "ran"
	stepNotified = "notified"
	stepRearmed  = "re-armed"
)

// componentKey is the attribute in which the agent names the part of it
// that logs.
const componentKey = "component"

// source is who logged a record: the side of the demo, and the agent's
// component ("" when the record names none).
type source struct {
	side, component string
}

// String names the source in a note: "nas", "agent/runtime".
func (s source) String() string {
	if s.component == "" {
		return s.side
	}
	return s.side + "/" + s.component
}

// ephemeralKeyNote begins the warning NAS logs when it signs with a key made
// in memory, which is what the demo asks of it.
const ephemeralKeyNote = "signing_keys_dir is not set"

// narrator prints steps. It is safe for concurrent use.
type narrator struct {
	start time.Time
	now   func() time.Time

	mu sync.Mutex
	w  io.Writer
	// held, until release, are the step lines printed while the banner is
	// still being written, so that they follow it.
	held     []string
	released bool
	fired    map[string]bool      // jobs that have been claimed at least once
	started  map[string]time.Time // run id → run started
	// ranDetail, when set, describes a finished run from the ledger and its
	// output (exit code, output snippet).
	ranDetail func(jobID, runID string) string
	// noticeDetail, when set, names where a notification went (a file's
	// path) from its id.
	noticeDetail func(id string) string
}

// newNarrator returns a narrator printing to w, with times relative to start.
func newNarrator(w io.Writer, start time.Time) *narrator {
	return &narrator{start: start, now: time.Now, w: w, fired: map[string]bool{}, started: map[string]time.Time{}}
}

// logger returns a logger for one side of the demo whose records feed n.
func (n *narrator) logger(side string) *slog.Logger {
	return slog.New(&observeHandler{narrator: n, side: side})
}

// setRanDetail sets how a finished run is described.
func (n *narrator) setRanDetail(f func(jobID, runID string) string) {
	n.mu.Lock()
	n.ranDetail = f
	n.mu.Unlock()
}

// setNoticeDetail sets how a sent notification's destination is found.
func (n *narrator) setNoticeDetail(f func(id string) string) {
	n.mu.Lock()
	n.noticeDetail = f
	n.mu.Unlock()
}

// step prints one step line: +T  JOB  STEP  detail.
func (n *narrator) step(job, step, detail string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.printLocked(job, step, detail)
}

func (n *narrator) printLocked(job, step, detail string) {
	rel := n.now().Sub(n.start).Seconds()
	if job == "" {
		job = "-"
	}
	line := fmt.Sprintf("%+9.3fs  %-10s %-15s %s\n", rel, job, step, detail)
	if !n.released {
		n.held = append(n.held, line)
		return
	}
	_, _ = io.WriteString(n.w, line)
}

// header prints a line of the banner, unindented by the time column.
func (n *narrator) header(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fmt.Fprintf(n.w, format+"\n", args...)
}

// release ends the banner: the step lines held until now are printed, and
// later ones as they come.
func (n *narrator) release() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, line := range n.held {
		_, _ = io.WriteString(n.w, line)
	}
	n.held, n.released = nil, true
}

// markFired records that job has had a claim: its next arm is a re-arm.
func (n *narrator) markFired(job string) {
	n.mu.Lock()
	n.fired[job] = true
	n.mu.Unlock()
}

// armStep names an arm of job: armed the first time, re-armed after a fire.
func (n *narrator) armStep(job string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fired[job] {
		return stepRearmed
	}
	return stepArmed
}

// observe turns one log record of src into a step, a note, or nothing. a
// holds the record's attributes and the logger's.
func (n *narrator) observe(src source, level slog.Level, msg string, a attrs) {
	var known bool
	switch src {
	case source{side: "nas"}:
		known = n.observeNAS(msg, a)
	case source{side: "agent", component: "http"}:
		known = n.observeFireEndpoint(msg, a)
	case source{side: "agent", component: "runtime"}:
		known = n.observeRuns(msg, a)
	case source{side: "agent", component: "notifier"}:
		known = n.observeNotices(msg, a)
	}
	if !known && level >= slog.LevelWarn {
		n.step(a.str("job_id"), strings.ToLower(level.String()), src.String()+": "+msg+a.rest("job_id", componentKey))
	}
}

// observeNAS narrates NAS's records; it reports whether it knew msg.
func (n *narrator) observeNAS(msg string, a attrs) bool {
	job := a.str("job_id")
	if strings.HasPrefix(msg, ephemeralKeyNote) {
		// The demo makes NAS's signing key in memory on purpose.
		return true
	}
	switch msg {
	case "armed":
		at, _ := a.time("fire_at")
		step := n.armStep(job)
		n.step(job, step, fmt.Sprintf("fire_at %s (in %s)  schedule %s", clock(at), roundDur(at.Sub(n.now())), a.str("schedule_id")))
	case "cancelled":
		n.step(job, "cancelled", "NAS removed the armed one-shot")
	case "fire dropped":
		n.step(job, "dropped", "NAS: "+a.str("reason"))
	case "relay duplicate":
		n.step(job, "duplicate", "NAS: this delivery was already handled")
	case "fire rejected":
		n.step(job, "rejected", "agent refused the fire: "+a.str("reason"))
	case "fire not taken; relay retries":
		n.step(job, "retry", "agent not reachable: "+a.str("reason"))
	case "fire delivered":
		// The agent's own steps say this better.
	default:
		return false
	}
	return true
}

// observeFireEndpoint narrates the agent's fire endpoint's records; it
// reports whether it knew msg.
func (n *narrator) observeFireEndpoint(msg string, a attrs) bool {
	job := a.str("job_id")
	switch msg {
	case "fire accepted":
		n.markFired(job)
		what := "run " + a.str("run_id")
		if at, ok := a.time("fire_at"); ok {
			what += fmt.Sprintf(" (claimed %s after fire_at)", roundDur(n.now().Sub(at)))
		}
		if a.str("skipped") == "true" {
			what = "slot consumed without a run: " + a.str("reason")
		}
		n.step(job, stepClaimed, what)
	case "fire duplicate":
		n.step(job, "duplicate", "slot already claimed: "+a.str("reason"))
	case "fire for an unknown job":
		n.step(job, "gone", "the agent has no such job")
	case "fire rejected":
		n.step(job, "token refused", a.str("error"))
	case "fire deferred":
		n.step(job, "retry", "the agent cannot claim now: "+a.str("reason"))
	default:
		return false
	}
	return true
}

// observeRuns narrates the agent runtime's run records; it reports whether
// it knew msg.
func (n *narrator) observeRuns(msg string, a attrs) bool {
	switch msg {
	case "run started":
		n.mu.Lock()
		n.started[a.str("run_id")] = n.now()
		n.mu.Unlock()
	case "run ended":
		n.ranStep(a)
	default:
		return false
	}
	return true
}

// observeNotices narrates the notifier's records: a sent notification
// becomes a notified step naming its event and destination. Retries and
// dead notifications are warnings and errors, printed as such.
func (n *narrator) observeNotices(msg string, a attrs) bool {
	if msg != "notification sent" {
		return false
	}
	n.mu.Lock()
	detail := n.noticeDetail
	n.mu.Unlock()
	what := a.str("event") + " → " + a.str("target")
	if detail != nil {
		if where := detail(a.str("id")); where != "" {
			what += " " + where
		}
	}
	n.step(a.str("job"), stepNotified, what)
	return true
}

// ranStep prints the ran step of a run that ended: its state, how long it
// took, and what the ledger says of it.
func (n *narrator) ranStep(a attrs) {
	job, runID := a.str("job_id"), a.str("run_id")
	n.mu.Lock()
	defer n.mu.Unlock()
	began, ok := n.started[runID]
	delete(n.started, runID)
	detail := a.str("state")
	if ok {
		detail += " in " + roundDur(n.now().Sub(began))
	}
	if n.ranDetail != nil {
		if more := n.ranDetail(job, runID); more != "" {
			detail += ", " + more
		}
	}
	if r := a.str("reason"); r != "" && a.str("state") != "succeeded" {
		detail += " (" + r + ")"
	}
	n.printLocked(job, stepRan, detail)
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
