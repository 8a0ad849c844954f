package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxOutput bounds the output tail a body carries, in bytes.
const MaxOutput = 4 << 10

// Body is the event a notification delivers: the JSON a webhook receives,
// a command reads on stdin and a file target appends as one line.
type Body struct {
	// ID is the notification id (the webhook-id).
	ID string `json:"id"`
	// Event is what happened.
	Event Event `json:"event"`
	// JobID, RunID and Slot name the run.
	JobID string    `json:"job_id"`
	RunID string    `json:"run_id"`
	Slot  time.Time `json:"slot"`
	// Status is the run's final state as the ledger records it.
	Status string `json:"status"`
	// ExitCode is the exit status of a command payload.
	ExitCode *int `json:"exit_code,omitempty"`
	// HTTPStatus is the answer's status of an http payload.
	HTTPStatus int `json:"http_status,omitempty"`
	// DurationMS is how long the run took.
	DurationMS int64 `json:"duration_ms"`
	// Output is the last MaxOutput bytes of the run's output, valid UTF-8.
	Output string `json:"output,omitempty"`
	// OutputTruncated says Output is a tail of a longer output.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// Error is the run's error text, if any.
	Error string `json:"error,omitempty"`
	// ConsecutiveFailures is the streak length of failed and recovered
	// events.
	ConsecutiveFailures int `json:"consecutive_failures,omitempty"`
	// Ledger references the run's final ledger line.
	Ledger string `json:"ledger,omitempty"`
	// Time is when the run ended.
	Time time.Time `json:"time"`
	// Breaker is set on an alert of EventChainBreakerOpen.
	Breaker *BreakerAlert `json:"breaker,omitempty"`
	// Fanout is set on the events of a fanout parent whose children ran:
	// how many there were, how they ended and which failed.
	Fanout *Fanout `json:"fanout,omitempty"`
}

// Run is what the run path knows about a finished run.
type Run struct {
	JobID string
	RunID string
	Slot  time.Time
	// Status is the ledger state that ended the run (succeeded, failed,
	// missed, interrupted; others emit nothing).
	Status string
	// Runner is the payload kind: "http" makes Code an HTTP status,
	// anything else an exit status.
	Runner   string
	Code     int
	Duration time.Duration
	Output   string
	Error    string
	// Ledger references the final ledger line (e.g. "runs/2026-11-24.jsonl#<run id>").
	Ledger string
	// Ended is when the run ended.
	Ended time.Time
	// Fanout counts the children of a fanout parent (nil for other runs).
	Fanout *Fanout
}

// Plan decides a finished run's notifications: the job's streak after the
// run and one notification per emitted event and subscribed target. The
// caller writes both in the same durable step as the run's final state.
func Plan(p Policy, s Streak, r Run) (Streak, []Notification) {
	before := s
	next, events := s.Next(p, Event(r.Status))
	var out []Notification
	for _, e := range events {
		for _, t := range p.Targets {
			if !t.Wants(e) {
				continue
			}
			b := r.body(e)
			switch e {
			case EventFailed:
				b.ConsecutiveFailures = next.Failures
			case EventRecovered:
				b.ConsecutiveFailures = before.Failures
			}
			b.ID = NotificationID(r.RunID, e, t)
			out = append(out, Notification{ID: b.ID, Target: t, Body: b, CreatedAt: r.Ended})
		}
	}
	return next, out
}

func (r Run) body(e Event) Body {
	b := Body{
		Event: e, JobID: r.JobID, RunID: r.RunID, Slot: r.Slot, Status: r.Status,
		DurationMS: r.Duration.Milliseconds(), Error: Tail(r.Error, MaxOutput),
		Ledger: r.Ledger, Time: r.Ended, Fanout: r.Fanout.Clone(),
	}
	b.Output = Tail(r.Output, MaxOutput)
	b.OutputTruncated = len(b.Output) < len(r.Output)
	if r.Runner == "http" {
		b.HTTPStatus = r.Code
	} else if r.Status == string(EventSucceeded) || r.Status == string(EventFailed) {
		code := r.Code
		b.ExitCode = &code
	}
	return b
}

// NotificationID derives the notification id from the run id, the event
// and the target, so a retry or a replay of the same notification keeps it
// and a receiver can de-duplicate on it.
func NotificationID(runID string, e Event, t Target) string {
	h := sha256.New()
	for _, part := range []string{runID, string(e), string(t.Kind), t.URL, t.Path} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	for _, a := range t.Command {
		h.Write([]byte(a))
		h.Write([]byte{1})
	}
	return "ntf_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Tail returns the last at most n bytes of s, starting on a rune boundary,
// with invalid UTF-8 replaced.
func Tail(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
		for i := 0; i < utf8.UTFMax && i < len(s); i++ {
			if utf8.RuneStart(s[i]) {
				s = s[i:]
				break
			}
		}
	}
	if utf8.ValidString(s) {
		return s
	}
	// Replacement may lengthen the text; it is valid now, so a second cut
	// ends the recursion.
	return Tail(strings.ToValidUTF8(s, "\uFFFD"), n)
}
