package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/chronoscron/chronos/agent/chain"
	"io"
	"sort"
	"sync"
	"time"
)

// Built-in payload kinds.
const (
	KindShell = "shell"
	KindHTTP  = "http"
)

// Payload is what a job runs: a kind and the fields that kind reads. Shell and
// HTTP are set for the built-in kinds; a host-defined kind keeps its own
// fields in Data.
type Payload struct {
	Kind  string          `json:"kind"`
	Shell *Shell          `json:"shell,omitempty"`
	HTTP  *HTTP           `json:"http,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// Shell is the payload of the shell runner: either Command, run by `sh -c`, or
// Argv, executed directly. Env adds variables to the agent's environment; Dir
// is the working directory (empty: the agent's).
type Shell struct {
	Command string            `json:"command,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
}

// HTTP is the payload of the http runner. Method defaults to GET with no body
// and POST with one; Accept lists the statuses that count as success (empty:
// any 2xx). Redirects are not followed unless FollowRedirects is set.
type HTTP struct {
	Method          string            `json:"method,omitempty"`
	URL             string            `json:"url"`
	Headers         map[string]string `json:"headers,omitempty"`
	Body            string            `json:"body,omitempty"`
	Accept          []int             `json:"accept,omitempty"`
	FollowRedirects bool              `json:"follow_redirects,omitempty"`
}

// Request is one run handed to a runner. The context given with it carries the
// job's timeout and is cancelled when the run must stop (timeout, replace,
// shutdown).
type Request struct {
	JobID   string
	RunID   string
	FireAt  time.Time
	Attempt int
	Payload Payload
	// Output receives the run's output (already size-capped by the caller).
	// It is never nil.
	Output io.Writer
	// Stderr, when set, receives what the run writes to its standard error,
	// kept apart from Output, which then receives its standard output only.
	// Nil sends both streams to Output.
	Stderr io.Writer
	// Processes, when set, is called by a runner that starts processes
	// with the run's long-lived processes (the process group leader first)
	// each time a new one is found, so the caller can record them: an agent
	// restarted after its owner died uses the record to kill exactly what
	// is left of the run. It must not block.
	Processes func([]Process)
	// Chain is the chain metadata of a chain step's run (nil otherwise): an
	// embedder's runner can put it in its prompt.
	Chain *chain.Meta
	// Fanout is the item of a fanout child's run (nil otherwise, the
	// reducer included): what the shell runner gets in the item variable
	// and the http runner in its URL and body, for a runner of any kind.
	Fanout *FanoutItem
	// Env are variables the run gets besides its payload's (the agent's
	// home, a chain step's metadata, a fanout child's item and parent run
	// id); runners that start processes add them to the environment, after
	// the payload's own.
	Env map[string]string
}

// FanoutItem is the item a fanout child runs for.
type FanoutItem struct {
	// ParentRunID is the run id of the fanout parent
	// (CHRONOS_PARENT_RUN_ID).
	ParentRunID string
	// Index is the item's position in the parent's plan, from 0.
	Index int
	// Item is the item itself: one line of the resolved inputs.
	Item string
	// Var is the job's item_var (FANOUT_ITEM unless set): the variable a
	// shell child finds Item in, and the ${Var} an http child's URL and
	// body have replaced by it.
	Var string
}

// Result is how a run ended. Err nil means success; ExitCode is the shell
// exit status (-1 when the process could not start or was killed) or the
// HTTP status (0 when not applicable).
type Result struct {
	Err      error
	ExitCode int
}

// Runner executes one payload kind.
type Runner interface {
	// Validate checks a payload when a job is created, so a bad job is refused
	// before it is stored.
	Validate(p Payload) error
	// Run executes the request until it ends or ctx is done.
	Run(ctx context.Context, req Request) Result
}

// ErrUnknownKind is returned for a payload kind no runner is registered for.
var ErrUnknownKind = errors.New("unknown payload kind")

// Registry maps payload kinds to runners. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	runners map[string]Runner
}

// NewRegistry returns a registry holding the built-in shell and http runners.
func NewRegistry() *Registry {
	r := &Registry{runners: map[string]Runner{}}
	r.runners[KindShell] = &ShellRunner{}
	r.runners[KindHTTP] = &HTTPRunner{}
	return r
}

// Register adds or replaces the runner for kind.
func (r *Registry) Register(kind string, rn Runner) error {
	if kind == "" || rn == nil {
		return errors.New("runner: register needs a kind and a runner")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runners[kind] = rn
	return nil
}

// Get returns the runner for kind.
func (r *Registry) Get(kind string) (Runner, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rn, ok := r.runners[kind]
	if !ok {
		return nil, fmt.Errorf("runner: %w %q", ErrUnknownKind, kind)
	}
	return rn, nil
}

// Kinds lists the registered kinds in order.
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.runners))
	for k := range r.runners {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Validate checks p with the runner of its kind.
func (r *Registry) Validate(p Payload) error {
	rn, err := r.Get(p.Kind)
	if err != nil {
		return err
	}
	return rn.Validate(p)
}

// CapWriter writes to W until Limit bytes have been written, then drops the
// rest and notes the truncation once. It is safe for concurrent use.
type CapWriter struct {
	W     io.Writer
	Limit int64

	mu        sync.Mutex
	n         int64
	truncated bool
}

// Write implements io.Writer; it always reports the whole of p as written so a
// producer is never stopped by the cap.
func (c *CapWriter) Write(p []byte) (int, error) {
	return c.write(c.W, p)
}

// Stream returns a writer to w that shares c's limit: a second stream of
// the same run (its standard error), capped with the first. The truncation
// note goes to c.W.
func (c *CapWriter) Stream(w io.Writer) io.Writer {
	return capStream{c: c, w: w}
}

// capStream is a stream of a CapWriter (see Stream).
type capStream struct {
	c *CapWriter
	w io.Writer
}

func (s capStream) Write(p []byte) (int, error) { return s.c.write(s.w, p) }

// write writes p to w within c's limit.
func (c *CapWriter) write(w io.Writer, p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.Limit - c.n
	if room <= 0 {
		if !c.truncated {
			c.truncated = true
			_, _ = io.WriteString(c.W, "\n[output truncated]\n")
		}
		return len(p), nil
	}
	chunk := p
	if int64(len(chunk)) > room {
		chunk = chunk[:room]
	}
	n, err := w.Write(chunk)
	c.n += int64(n)
	if err != nil {
		return n, err
	}
	if len(chunk) < len(p) && !c.truncated {
		c.truncated = true
		_, _ = io.WriteString(c.W, "\n[output truncated]\n")
	}
	return len(p), nil
}

// Truncated reports whether output was dropped.
func (c *CapWriter) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.truncated
}
