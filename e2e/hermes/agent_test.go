package hermese2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/buildtest"
)

// agentOptions configure one Hermes-like agent.
type agentOptions struct {
	portalURL, jwksURL string
	// audience is the agent's cron.chronos.expected_audience.
	audience string
	// tokenFile holds the access token it sends NAS.
	tokenFile string
	// coldFailures is how many key-set fetches fail before the key set is
	// reachable (each failure answers a fire 401).
	coldFailures int
}

// agentFor is the agent NAS knows as agentID, with coldFailures.
func (n *nasEnv) agentFor(coldFailures int) agentOptions {
	return agentOptions{portalURL: n.publicURL, jwksURL: n.jwksURL(), audience: "agent:" + instanceID,
		tokenFile: n.tokenFile, coldFailures: coldFailures}
}

// message is one line the agent writes: a reply to a command (ID set) or an
// event (Event set).
type message struct {
	ID    int    `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
	// Status is NAS's HTTP status of a failed call (replies) or the status
	// the fire endpoint answered (fire events).
	Status    int    `json:"status"`
	ErrorCode string `json:"error_code"`

	// add_job
	FireAt     string `json:"fire_at"`
	ScheduleID string `json:"schedule_id"`
	// list
	Page json.RawMessage `json:"page"`
	// reconcile, remove_job
	Listed      bool     `json:"listed"`
	Observed    int      `json:"observed"`
	Provisioned []string `json:"provisioned"`
	Cancelled   []string `json:"cancelled"`
	Errors      []string `json:"errors"`
	// calls
	Calls map[string]int `json:"calls"`

	// events: ready, fire, run, rearmed, rearm_failed
	Event       string `json:"event"`
	CallbackURL string `json:"callback_url"`
	PyJWT       string `json:"pyjwt"`
	JobID       string `json:"job_id"`
	Attempt     int    `json:"attempt"`
	Outcome     string `json:"outcome"`
	Reason      string `json:"reason"`
	Alg         string `json:"alg"`
	Kid         string `json:"kid"`
	Typ         string `json:"typ"`
	Aud         any    `json:"aud"`
	Iss         string `json:"iss"`
	Purpose     string `json:"purpose"`
}

// hermes is the Python agent process (testdata/hermes_agent.py).
type hermes struct {
	t           *testing.T
	callbackURL string
	pyjwt       string

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *buildtest.Buffer
	exited chan struct{}

	callMu  sync.Mutex // one command at a time
	nextID  int
	replies chan message

	mu      sync.Mutex
	events  []message
	changed chan struct{} // closed and replaced on every event
}

// startHermes starts the agent and waits for its fire endpoint.
func startHermes(t *testing.T, o agentOptions) *hermes {
	t.Helper()
	h := &hermes{t: t, stderr: &buildtest.Buffer{}, exited: make(chan struct{}),
		replies: make(chan message, 1), changed: make(chan struct{})}
	h.cmd = exec.Command(python, filepath.Join("testdata", "hermes_agent.py"),
		"--portal-url", o.portalURL, "--jwks-url", o.jwksURL, "--audience", o.audience,
		"--token-file", o.tokenFile, "--cold-jwks-failures", strconv.Itoa(o.coldFailures))
	h.cmd.Stderr = h.stderr
	h.cmd.SysProcAttr = childAttr()
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("start the Hermes-like agent: %v", err)
	}
	go h.read(stdout)
	t.Cleanup(func() {
		_ = h.stdin.Close() // EOF: the agent stops
		select {
		case <-h.exited:
		case <-time.After(5 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.exited
		}
		_ = h.cmd.Wait()
		if t.Failed() {
			t.Logf("---- events of the Hermes-like agent:\n%s", h.dump())
			t.Logf("---- its log:\n%s", tail(h.stderr.String(), 6000))
		}
	})
	h.waitFor("the agent's fire endpoint", 20*time.Second, nil, func(evs []message) (bool, string) {
		for _, e := range evs {
			if e.Event == "ready" {
				h.callbackURL, h.pyjwt = e.CallbackURL, e.PyJWT
				return true, ""
			}
		}
		return false, "no ready event"
	})
	t.Logf("Hermes-like agent on %s (PyJWT %s, %s)", h.callbackURL, h.pyjwt, python)
	return h
}

// read demultiplexes the agent's stdout into replies and events.
func (h *hermes) read(r io.Reader) {
	defer close(h.exited)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			h.stderr.Write([]byte("undecodable line on stdout: " + sc.Text() + "\n"))
			continue
		}
		if m.Event == "" {
			h.replies <- m
			continue
		}
		h.mu.Lock()
		h.events = append(h.events, m)
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
	}
}

// call sends one command and returns the agent's reply.
func (h *hermes) call(cmd string, args map[string]any) message {
	h.t.Helper()
	h.callMu.Lock()
	defer h.callMu.Unlock()
	h.nextID++
	msg := map[string]any{"id": h.nextID, "cmd": cmd}
	for k, v := range args {
		msg[k] = v
	}
	line, err := json.Marshal(msg)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.stdin.Write(append(line, '\n')); err != nil {
		h.t.Fatalf("command %s: %v", cmd, err)
	}
	select {
	case r := <-h.replies:
		if r.ID != h.nextID {
			h.t.Fatalf("command %s: reply %d to command %d", cmd, r.ID, h.nextID)
		}
		return r
	case <-h.exited:
		h.t.Fatalf("command %s: the agent exited:\n%s", cmd, tail(h.stderr.String(), 4000))
	case <-time.After(time.Minute):
		h.t.Fatalf("command %s: no reply within a minute", cmd)
	}
	return message{}
}

// mustCall is call for a command that must succeed.
func (h *hermes) mustCall(cmd string, args map[string]any) message {
	h.t.Helper()
	r := h.call(cmd, args)
	if !r.OK {
		h.t.Fatalf("command %s %v failed: %s (NAS status %d %s)", cmd, args, r.Error, r.Status, r.ErrorCode)
	}
	return r
}

// addJob adds (or moves) a job due in `in` with fire_at spelled in the
// +hh:mm zone offsetMinutes (microseconds kept when micro), recurring every
// `every` seconds when every > 0, and arms it as Hermes does: one provision.
func (h *hermes) addJob(jobID string, in time.Duration, offsetMinutes int, micro bool, every float64) message {
	h.t.Helper()
	args := map[string]any{"job_id": jobID, "in_seconds": in.Seconds(), "offset_minutes": offsetMinutes, "micro": micro}
	if every > 0 {
		args["every"] = every
	}
	return h.mustCall("add_job", args)
}

// list is one Hermes list read: GET without parameters, one page.
func (h *hermes) list() listPage {
	h.t.Helper()
	r := h.mustCall("list", nil)
	var p listPage
	if err := json.Unmarshal(r.Page, &p); err != nil {
		h.t.Fatalf("list page: %v: %s", err, r.Page)
	}
	return p
}

// snapshot returns the events so far.
func (h *hermes) snapshot() []message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]message(nil), h.events...)
}

// waitFor waits until cond holds on the events. It re-checks on every new
// event and, when poll is set, also every 200 ms, for conditions on state
// outside the agent (NAS's dead letter) that sends no signal. fatal, if set,
// is checked first each time and fails the test at once when it reports a
// state the test cannot recover from.
func (h *hermes) waitFor(what string, within time.Duration, fatal func([]message) string, cond func([]message) (bool, string)) {
	h.t.Helper()
	h.wait(what, within, false, fatal, cond)
}

// waitPolling is waitFor that also re-checks every 200 ms.
func (h *hermes) waitPolling(what string, within time.Duration, fatal func([]message) string, cond func([]message) (bool, string)) {
	h.t.Helper()
	h.wait(what, within, true, fatal, cond)
}

func (h *hermes) wait(what string, within time.Duration, poll bool, fatal func([]message) string, cond func([]message) (bool, string)) {
	h.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	var tick <-chan time.Time
	if poll {
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		h.mu.Lock()
		evs := append([]message(nil), h.events...)
		changed := h.changed
		h.mu.Unlock()
		if fatal != nil {
			if why := fatal(evs); why != "" {
				h.t.Fatalf("waiting for %s: %s", what, why)
			}
		}
		ok, why := cond(evs)
		if ok {
			return
		}
		select {
		case <-changed:
		case <-tick:
		case <-h.exited:
			h.t.Fatalf("waiting for %s: the agent exited (%s)", what, why)
		case <-deadline.C:
			h.t.Fatalf("timed out after %s waiting for %s: %s", within, what, why)
		}
	}
}

// dump formats the events for a failure message.
func (h *hermes) dump() string {
	var b strings.Builder
	for _, e := range h.snapshot() {
		switch e.Event {
		case "fire":
			fmt.Fprintf(&b, "  fire %-16s fire_at %s attempt %d alg %s → %d %s %s\n", e.JobID, e.FireAt, e.Attempt, e.Alg, e.Status, e.Outcome, e.Reason)
		case "run":
			fmt.Fprintf(&b, "  run  %-16s fire_at %s attempt %d\n", e.JobID, e.FireAt, e.Attempt)
		case "ready":
			fmt.Fprintf(&b, "  ready on %s (PyJWT %s)\n", e.CallbackURL, e.PyJWT)
		default:
			fmt.Fprintf(&b, "  %s %s fire_at %s %s\n", e.Event, e.JobID, e.FireAt, e.Error)
		}
	}
	return b.String()
}

// fires returns the fire events of job (all jobs when job is empty).
func fires(evs []message, job string) []message {
	var out []message
	for _, e := range evs {
		if e.Event == "fire" && (job == "" || e.JobID == job) {
			out = append(out, e)
		}
	}
	return out
}

// runs returns the run events of job.
func runs(evs []message, job string) []message {
	var out []message
	for _, e := range evs {
		if e.Event == "run" && e.JobID == job {
			out = append(out, e)
		}
	}
	return out
}

// count returns how many events of kind there are for job.
func count(evs []message, kind, job string) int {
	n := 0
	for _, e := range evs {
		if e.Event == kind && e.JobID == job {
			n++
		}
	}
	return n
}

// refusedByVerifier reports the first fire the agent's verifier refused: a
// token PyJWT would not accept is never healed by a retry, so a test whose
// agent has a warm key set stops at once with the verifier's reason.
func refusedByVerifier(evs []message) string {
	for _, e := range fires(evs, "") {
		if e.Outcome == "unauthorized" {
			return fmt.Sprintf("the agent's PyJWT verifier refused the fire of %s (token alg %q): %s", e.JobID, e.Alg, e.Reason)
		}
	}
	return ""
}
