package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/store"
	"github.com/chronoscron/chronos/contract"
)

// Client calls a running agent's local API with its admin token. The
// commands that change a home use it, when an agent serves the home, so
// that a run gets the agent's user, environment and directory. The jobs it
// reads, adds and edits are answered with their env values (reveal=env),
// as the home's files hold them: its caller holds the token.
type Client struct {
	base  string
	token string
	hc    *http.Client
	// PID is the agent's process, when known (Dial).
	PID int
}

// NewClient returns a client of the API at base (http://127.0.0.1:8788)
// sending token; hc nil means a client without timeout (a run waited for
// may take long; the context bounds each call).
func NewClient(base, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(base, "/"), token: token, hc: hc}
}

// Dial returns a client of the agent serving home, found through the
// home's serving record: ok is false when no agent with a local API runs
// for it (none recorded, or its process is gone). The token comes from
// the file the record names (ui_token_file, else <home>/ui-token); when it
// cannot be read the error says so.
func Dial(home string) (c *Client, ok bool, err error) {
	rec, found, err := provider.ReadServing(home)
	if err != nil || !found || rec.UI == "" || !procfs.Alive(rec.PID) {
		return nil, false, nil // a record that cannot be read names no agent
	}
	tok, err := ReadToken(TokenPath(home, rec.UITokenFile))
	if err != nil {
		return nil, false, fmt.Errorf("the agent serving %s runs (pid %d, %s), but its admin token cannot be read: %w", home, rec.PID, rec.UI, err)
	}
	c = NewClient(rec.UI, tok, nil)
	c.PID = rec.PID
	return c, true, nil
}

// Serving returns a client of the agent serving home, or nil when none runs
// with a local API (see Dial).
func Serving(home string) (*Client, error) {
	c, ok, err := Dial(home)
	if !ok {
		return nil, err
	}
	return c, nil
}

// Made says in one line that the agent serving home made a change through
// this client, and arms it.
func (c *Client) Made(home string) string {
	return fmt.Sprintf("done by the agent serving home %s (pid %d, %s), which arms the change", home, c.PID, c.base)
}

// JobChanger pauses, resumes and removes jobs: *agent.Runtime in this
// process, or *Client through the running agent.
type JobChanger interface {
	Pause(ctx context.Context, id, reason string) (job.Job, error)
	Resume(ctx context.Context, id string) (job.Job, error)
	Remove(ctx context.Context, id string) error
}

// RunWaiter runs a job now and waits for the run: *agent.Runtime in this
// process, or *Client in the running agent.
type RunWaiter interface {
	RunAndWait(ctx context.Context, id string, o agent.RunOptions) (ledger.Run, error)
}

var (
	_ JobChanger = (*agent.Runtime)(nil)
	_ JobChanger = (*Client)(nil)
	_ RunWaiter  = (*agent.Runtime)(nil)
	_ RunWaiter  = (*Client)(nil)
)

// Base returns the API's base URL.
func (c *Client) Base() string { return c.base }

// APIError is an error answer of the API. It wraps the runtime's error of
// the same meaning (store.ErrNotFound, store.ErrExists,
// agent.ErrInvalidJob, chain.ErrClosed, chain.ErrExpired), so callers test
// for those.
type APIError struct {
	Status      int
	Code        string
	Description string
}

// Error implements error.
func (e *APIError) Error() string {
	if e.Description != "" {
		return e.Description
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
}

// Unwrap returns the runtime's error of the same meaning, if any.
func (e *APIError) Unwrap() error {
	switch {
	case e.Code == contract.CodeNotFound && e.Status == http.StatusNotFound:
		return store.ErrNotFound
	case e.Code == CodeInvalidJob || e.Code == contract.CodeInvalidJobID:
		return agent.ErrInvalidJob
	case e.Code == CodeConflict && strings.Contains(e.Description, "exists"):
		return store.ErrExists
	case e.Code == CodeChainExpired:
		return chain.ErrExpired
	case e.Code == CodeChainClosed:
		return chain.ErrClosed
	}
	return nil
}

// do sends one call; out, when not nil, receives the JSON answer.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	status, data, err := contract.Call{Method: method, URL: c.base + path, Token: c.token, Body: in, Limit: 64 << 20}.Send(ctx, c.hc)
	if err != nil {
		return fmt.Errorf("local api %s %s: %w", method, path, err)
	}
	if status >= 300 {
		if e, ok := contract.ErrorBody(data); ok {
			return &APIError{Status: status, Code: e.Code, Description: e.Description}
		}
		return &APIError{Status: status, Code: "http_error", Description: strings.TrimSpace(string(data))}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("local api %s %s: answer: %w", method, path, err)
		}
	}
	return nil
}

func jobPath(id string, rest ...string) string {
	return "/api/jobs/" + url.PathEscape(id) + strings.Join(rest, "")
}

// revealing is the query that asks for env values.
const revealing = "?" + QueryReveal + "=" + RevealEnv

// Jobs lists the jobs.
func (c *Client) Jobs(ctx context.Context) ([]JobInfo, error) {
	var l JobList
	err := c.do(ctx, http.MethodGet, "/api/jobs"+revealing, nil, &l)
	return l.Jobs, err
}

// Job returns one job.
func (c *Client) Job(ctx context.Context, id string) (JobInfo, error) {
	var j JobInfo
	err := c.do(ctx, http.MethodGet, jobPath(id)+revealing, nil, &j)
	return j, err
}

// AddJob creates a job from spec.
func (c *Client) AddJob(ctx context.Context, spec agent.JobSpec) (JobInfo, error) {
	var j JobInfo
	err := c.do(ctx, http.MethodPost, "/api/jobs"+revealing, SpecOf(spec), &j)
	return j, err
}

// EditJob changes a job.
func (c *Client) EditJob(ctx context.Context, id string, p JobPatch) (JobInfo, error) {
	var j JobInfo
	err := c.do(ctx, http.MethodPatch, jobPath(id)+revealing, p, &j)
	return j, err
}

// Pause pauses a job, with reason.
func (c *Client) Pause(ctx context.Context, id, reason string) (job.Job, error) {
	var j JobInfo
	err := c.do(ctx, http.MethodPost, jobPath(id, "/pause"), PauseRequest{Reason: reason}, &j)
	return j.Job, err
}

// Resume resumes a paused job.
func (c *Client) Resume(ctx context.Context, id string) (job.Job, error) {
	var j JobInfo
	err := c.do(ctx, http.MethodPost, jobPath(id, "/resume"), nil, &j)
	return j.Job, err
}

// Remove deletes a job.
func (c *Client) Remove(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, jobPath(id), nil, nil)
}

// Start starts a run of job id and answers at once.
func (c *Client) Start(ctx context.Context, id string, o agent.RunOptions) (RunStarted, error) {
	var r RunStarted
	err := c.do(ctx, http.MethodPost, jobPath(id, "/run"), RunRequest{Force: o.Force}, &r)
	return r, err
}

// RunAndWait runs job id in the agent now and waits for the run to end.
// A run the agent did not start (skipped by a policy) is answered as it
// was recorded.
func (c *Client) RunAndWait(ctx context.Context, id string, o agent.RunOptions) (ledger.Run, error) {
	var r RunInfo
	err := c.do(ctx, http.MethodPost, jobPath(id, "/run"), RunRequest{Force: o.Force, Wait: true}, &r)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusConflict {
			return ledger.Run{}, fmt.Errorf("jobs run: %w", err)
		}
		return ledger.Run{}, err
	}
	if r.RunID == "" {
		return ledger.Run{}, fmt.Errorf("jobs run: the agent started no run: %s", r.Reason)
	}
	return r.Run, nil
}

// Runs lists runs; query holds the filters (job_id, status, since,
// limit, cursor).
func (c *Client) Runs(ctx context.Context, query url.Values) (RunList, error) {
	var l RunList
	path := "/api/runs"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	err := c.do(ctx, http.MethodGet, path, nil, &l)
	return l, err
}

// Run returns one run with its output.
func (c *Client) Run(ctx context.Context, runID string) (RunDetail, error) {
	var d RunDetail
	err := c.do(ctx, http.MethodGet, "/api/runs/"+url.PathEscape(runID), nil, &d)
	return d, err
}

// Cancel asks the agent to stop a live run.
func (c *Client) Cancel(ctx context.Context, runID, reason string) error {
	return c.do(ctx, http.MethodPost, "/api/runs/"+url.PathEscape(runID)+"/cancel", CancelRequest{Reason: reason}, nil)
}
