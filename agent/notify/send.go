package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Outcome is how one delivery attempt ended.
type Outcome string

// Attempt outcomes.
const (
	// OutcomeSent: the target took the notification.
	OutcomeSent Outcome = "sent"
	// OutcomeRetry: a transient failure; try again later.
	OutcomeRetry Outcome = "retry"
	// OutcomeDead: a permanent failure; retrying cannot help.
	OutcomeDead Outcome = "dead"
)

// Result is what a Sender reports for one attempt.
type Result struct {
	Outcome Outcome
	// Status is the HTTP status (webhook) or exit status (command).
	Status int
	// RetryAfter is the receiver's Retry-After, if it sent one.
	RetryAfter time.Duration
	// Error describes a failure.
	Error string
}

// Sender delivers one notification once.
type Sender interface {
	Send(ctx context.Context, n Notification) Result
}

// Encode returns the JSON body of a notification, the same bytes on every
// attempt.
func Encode(n Notification) ([]byte, error) {
	b, err := json.Marshal(n.Body)
	if err != nil {
		return nil, fmt.Errorf("notify: encode %s: %w", n.ID, err)
	}
	return b, nil
}

// Senders dispatches a notification to the sender of its target's kind.
type Senders struct {
	Webhook Sender
	Command Sender
	File    Sender
}

// Send implements Sender.
func (s Senders) Send(ctx context.Context, n Notification) Result {
	var to Sender
	switch n.Target.Kind {
	case KindWebhook:
		to = s.Webhook
	case KindCommand:
		to = s.Command
	case KindFile:
		to = s.File
	}
	if to == nil {
		return Result{Outcome: OutcomeDead, Error: fmt.Sprintf("no sender for target kind %q", n.Target.Kind)}
	}
	return to.Send(ctx, n)
}

// WebhookSender POSTs a notification's JSON, signed with Standard Webhooks
// v1. Build it with NewWebhookSender.
type WebhookSender struct {
	client *http.Client
	addrs  AddressPolicy
	secret Secret
	now    func() time.Time
}

// WebhookOptions configures a WebhookSender.
type WebhookOptions struct {
	// Secret signs every request.
	Secret Secret
	// Addresses is the address policy: the URL's host and every address
	// connected to must pass it.
	Addresses AddressPolicy
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
	// Now stamps webhook-timestamp (default time.Now).
	Now func() time.Time
}

// NewWebhookSender returns a sender using an SSRF-safe client.
func NewWebhookSender(o WebhookOptions) *WebhookSender {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &WebhookSender{client: NewClient(o.Addresses, o.Timeout), addrs: o.Addresses, secret: o.Secret, now: o.Now}
}

// maxAnswer caps how much of a receiver's answer is read.
const maxAnswer = 4 << 10

// Send implements Sender: 2xx is sent; 408, 429, 5xx and network errors
// retry (honouring Retry-After); a refused address, a redirect and any
// other status are dead. The URL's host is checked against the address
// policy as when the target was added (a numeric form is the address it
// names), then every address connected to is.
func (w *WebhookSender) Send(ctx context.Context, n Notification) Result {
	body, err := Encode(n)
	if err != nil {
		return Result{Outcome: OutcomeDead, Error: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.Target.URL, bytes.NewReader(body))
	if err != nil {
		return Result{Outcome: OutcomeDead, Error: fmt.Sprintf("build request: %v", err)}
	}
	if err := w.addrs.CheckHost(ctx, req.URL.Hostname(), nil, nil); err != nil {
		return Result{Outcome: OutcomeDead, Error: err.Error()}
	}
	dialCanonical(req)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "chronos-notify/1")
	req.Header.Set(HeaderID, n.ID)
	at := w.now()
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(HeaderSignature, w.secret.Sign(n.ID, at, body))
	req.Header.Set(HeaderIdempotencyKey, n.ID)
	resp, err := w.client.Do(req)
	if err != nil {
		if errors.Is(err, ErrAddressNotAllowed) {
			return Result{Outcome: OutcomeDead, Error: err.Error()}
		}
		return Result{Outcome: OutcomeRetry, Error: err.Error()}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	return classify(resp.StatusCode, resp.Header.Get("Retry-After"), answer, at)
}

// dialCanonical points req at the address its host names when the host is
// a numeric form other than the canonical one (2130706433, 127.1): what
// was checked is what is dialled, whichever resolver the platform uses.
func dialCanonical(req *http.Request) {
	host := req.URL.Hostname()
	ip, ok, err := ParseHost(host)
	if err != nil || !ok || ip.String() == host {
		return
	}
	if port := req.URL.Port(); port != "" {
		req.URL.Host = net.JoinHostPort(ip.String(), port)
	} else if ip.Is6() {
		req.URL.Host = "[" + ip.String() + "]"
	} else {
		req.URL.Host = ip.String()
	}
	req.Host = ""
}

// classify maps a receiver's answer to an outcome.
func classify(status int, retryAfter string, answer []byte, now time.Time) Result {
	r := Result{Status: status}
	switch {
	case status >= 200 && status < 300:
		r.Outcome = OutcomeSent
		return r
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		r.Outcome = OutcomeRetry
		r.RetryAfter = ParseRetryAfter(retryAfter, now)
	default:
		r.Outcome = OutcomeDead
	}
	r.Error = fmt.Sprintf("receiver answered %d", status)
	if a := strings.TrimSpace(Tail(string(answer), 200)); a != "" {
		r.Error += ": " + a
	}
	return r
}

// ParseRetryAfter reads a Retry-After value: delay seconds or an HTTP
// date (relative to now). Anything else is zero.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(365*24*3600))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// CommandSender runs a command target's argv with the event in its
// environment and the JSON body on stdin.
type CommandSender struct {
	// Timeout bounds one run (default 30s); the process is killed after it.
	Timeout time.Duration
	// Env is the base environment (nil: the agent's own).
	Env []string
}

// Send implements Sender: exit 0 is sent; a program that cannot be found
// or started is dead; any other exit or a timeout retries.
func (c CommandSender) Send(ctx context.Context, n Notification) Result {
	body, err := Encode(n)
	if err != nil {
		return Result{Outcome: OutcomeDead, Error: err.Error()}
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.Target.Command[0], n.Target.Command[1:]...)
	cmd.Env = append(c.baseEnv(), EventEnv(n)...)
	cmd.Stdin = bytes.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if err == nil {
		return Result{Outcome: OutcomeSent}
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		msg := fmt.Sprintf("command exited %d", exit.ExitCode())
		if ctx.Err() != nil {
			msg = fmt.Sprintf("command timed out after %s", timeout)
		}
		if o := strings.TrimSpace(Tail(out.String(), 200)); o != "" {
			msg += ": " + o
		}
		return Result{Outcome: OutcomeRetry, Status: exit.ExitCode(), Error: msg}
	}
	return Result{Outcome: OutcomeDead, Error: fmt.Sprintf("command: %v", err)}
}

func (c CommandSender) baseEnv() []string {
	if c.Env != nil {
		return append([]string(nil), c.Env...)
	}
	return os.Environ()
}

// EventEnv returns the CHRONOS_* variables a command target sees.
func EventEnv(n Notification) []string {
	b := n.Body
	env := []string{
		"CHRONOS_EVENT=" + string(b.Event),
		"CHRONOS_NOTIFICATION_ID=" + n.ID,
		"CHRONOS_JOB_ID=" + b.JobID,
		"CHRONOS_RUN_ID=" + b.RunID,
		"CHRONOS_SLOT=" + b.Slot.UTC().Format(time.RFC3339),
		"CHRONOS_STATUS=" + b.Status,
		"CHRONOS_DURATION_MS=" + strconv.FormatInt(b.DurationMS, 10),
		"CHRONOS_LEDGER=" + b.Ledger,
	}
	if b.ExitCode != nil {
		env = append(env, "CHRONOS_EXIT_CODE="+strconv.Itoa(*b.ExitCode))
	}
	if b.HTTPStatus != 0 {
		env = append(env, "CHRONOS_HTTP_STATUS="+strconv.Itoa(b.HTTPStatus))
	}
	if b.ConsecutiveFailures != 0 {
		env = append(env, "CHRONOS_CONSECUTIVE_FAILURES="+strconv.Itoa(b.ConsecutiveFailures))
	}
	if f := b.Fanout; f != nil {
		env = append(env, "CHRONOS_FANOUT_ITEMS="+strconv.Itoa(f.Items),
			"CHRONOS_FANOUT_SUCCEEDED="+strconv.Itoa(f.Succeeded), "CHRONOS_FANOUT_FAILED="+strconv.Itoa(f.Failed))
	}
	return env
}

// FileSender appends a notification as one JSON line to a file target.
type FileSender struct{}

// Send implements Sender: the line is written with one O_APPEND write and
// fsynced before the notification counts as sent.
func (FileSender) Send(ctx context.Context, n Notification) Result {
	if err := ctx.Err(); err != nil {
		return Result{Outcome: OutcomeRetry, Error: err.Error()}
	}
	body, err := Encode(n)
	if err != nil {
		return Result{Outcome: OutcomeDead, Error: err.Error()}
	}
	if err := appendLine(n.Target.Path, append(body, '\n')); err != nil {
		return Result{Outcome: OutcomeRetry, Error: err.Error()}
	}
	return Result{Outcome: OutcomeSent}
}

// appendLine appends line to path with one write and an fsync, first ending
// a torn last line so the new one stays whole.
func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	if _, err := f.Write(line); err != nil {
		return fmt.Errorf("append %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}
