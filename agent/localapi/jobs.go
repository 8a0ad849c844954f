package localapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
	"github.com/chronoscron/chronos/contract"
)

// nextFires is how many next fires a job's answer lists.
const nextFires = 3

// JobSpec is the body of POST /api/jobs: the spec `chronos jobs add` takes.
// Durations are Go duration strings ("30s"); Notify is the job's
// notification policy as jobs.json keeps it.
type JobSpec struct {
	ID           string         `json:"id,omitempty"`
	Name         string         `json:"name,omitempty"`
	Schedule     string         `json:"schedule"`
	Timezone     string         `json:"timezone,omitempty"`
	Repeat       int            `json:"repeat,omitempty"`
	Payload      runner.Payload `json:"payload"`
	Timeout      job.Duration   `json:"timeout,omitempty"`
	Grace        job.Duration   `json:"grace,omitempty"`
	Misfire      string         `json:"misfire,omitempty"`
	Overlap      string         `json:"overlap,omitempty"`
	Window       string         `json:"window,omitempty"`
	OnInterrupt  string         `json:"on_interrupt,omitempty"`
	Retry        *job.Retry     `json:"retry,omitempty"`
	Paused       bool           `json:"paused,omitempty"`
	PausedReason string         `json:"paused_reason,omitempty"`
	Notify       *notify.Policy `json:"notify,omitempty"`
	// Flex is the flexible window ("10m"; whole seconds, at most 24h),
	// as jobs.json keeps it; absent: none.
	Flex job.Duration `json:"flex,omitempty"`
	// JobKind is plain (default), workflow or fanout, with its settings
	// in Workflow or Fanout.
	JobKind  string        `json:"job_kind,omitempty"`
	Workflow *job.Workflow `json:"workflow,omitempty"`
	Fanout   *job.Fanout   `json:"fanout,omitempty"`
}

// SpecOf is the wire form of s.
func SpecOf(s agent.JobSpec) JobSpec {
	w := JobSpec{ID: s.ID, Name: s.Name, Schedule: s.Schedule, Timezone: s.Timezone, Repeat: s.Repeat,
		Payload: s.Payload, Timeout: job.Duration(s.Timeout), Grace: job.Duration(s.Grace), Flex: job.Duration(s.Flex), Misfire: s.Misfire,
		Overlap: s.Overlap, Window: s.Window, OnInterrupt: s.OnInterrupt, Paused: s.Paused, PausedReason: s.PausedReason,
		JobKind: s.JobKind, Workflow: s.Workflow, Fanout: s.Fanout}
	if s.Retry != (job.Retry{}) {
		r := s.Retry
		w.Retry = &r
	}
	if len(s.Notify.Targets) > 0 || s.Notify.NotifyAfter != 0 || s.Notify.RenotifyEvery != 0 {
		n := s.Notify
		w.Notify = &n
	}
	return w
}

// Spec is the runtime's form of w.
func (w JobSpec) Spec() agent.JobSpec {
	s := agent.JobSpec{ID: w.ID, Name: w.Name, Schedule: w.Schedule, Timezone: w.Timezone, Repeat: w.Repeat,
		Payload: w.Payload, Timeout: time.Duration(w.Timeout), Grace: time.Duration(w.Grace), Flex: time.Duration(w.Flex), Misfire: w.Misfire,
		Overlap: w.Overlap, Window: w.Window, OnInterrupt: w.OnInterrupt, Paused: w.Paused, PausedReason: w.PausedReason,
		JobKind: w.JobKind, Workflow: w.Workflow, Fanout: w.Fanout}
	if w.Retry != nil {
		s.Retry = *w.Retry
	}
	if w.Notify != nil {
		s.Notify = *w.Notify
	}
	return s
}

// JobPatch is the body of PATCH /api/jobs/{id}: the change `chronos jobs
// edit` makes. Absent fields are kept. NotifySpecs replaces the job's
// notification targets (["none"] removes them).
type JobPatch struct {
	Name          *string         `json:"name,omitempty"`
	Schedule      *string         `json:"schedule,omitempty"`
	Timezone      *string         `json:"timezone,omitempty"`
	Repeat        *int            `json:"repeat,omitempty"`
	Payload       *runner.Payload `json:"payload,omitempty"`
	Timeout       *job.Duration   `json:"timeout,omitempty"`
	Grace         *job.Duration   `json:"grace,omitempty"`
	Misfire       *string         `json:"misfire,omitempty"`
	Overlap       *string         `json:"overlap,omitempty"`
	Window        *string         `json:"window,omitempty"`
	OnInterrupt   *string         `json:"on_interrupt,omitempty"`
	Retry         *job.Retry      `json:"retry,omitempty"`
	NotifySpecs   []string        `json:"notify_specs,omitempty"`
	NotifyAfter   *int            `json:"notify_after,omitempty"`
	RenotifyEvery *int            `json:"renotify_every,omitempty"`
	// Flex sets the flexible window ("0s" removes it).
	Flex *job.Duration `json:"flex,omitempty"`
}

// Patch is the runtime's form of w.
func (w JobPatch) Patch() agent.JobPatch {
	p := agent.JobPatch{Name: w.Name, Schedule: w.Schedule, Timezone: w.Timezone, Repeat: w.Repeat, Payload: w.Payload,
		Misfire: w.Misfire, Overlap: w.Overlap, Window: w.Window, OnInterrupt: w.OnInterrupt, Retry: w.Retry}
	if w.Timeout != nil {
		d := time.Duration(*w.Timeout)
		p.Timeout = &d
	}
	if w.Grace != nil {
		d := time.Duration(*w.Grace)
		p.Grace = &d
	}
	if w.Flex != nil {
		d := time.Duration(*w.Flex)
		p.Flex = &d
	}
	ch := notify.Change{Specs: w.NotifySpecs, NotifyAfter: w.NotifyAfter, RenotifyEvery: w.RenotifyEvery}
	if !ch.Empty() {
		p.Notify = &ch
	}
	return p
}

// JobInfo is a job as the API answers it: its view (state, schedule as
// understood), its job kind, its next fires and, for a workflow, what each
// dependency's latest run in the window was. Unless the caller asks with
// reveal=env, each value of its shell payload's env is RedactedValue and
// EnvRedacted is set.
type JobInfo struct {
	agent.JobView
	// JobKind is plain, workflow or fanout (always present, unlike the
	// stored job's field).
	JobKind   string      `json:"job_kind"`
	NextFires []time.Time `json:"next_fires"`
	// Dependencies is a workflow's depends_on, each with the state of its
	// latest finished run within the window ("missing" when none).
	Dependencies []agent.DepStatus `json:"dependencies,omitempty"`
	// EnvRedacted says the values of payload.shell.env were replaced by
	// RedactedValue (the names are kept); reveal=env answers them.
	EnvRedacted bool `json:"env_redacted,omitempty"`
	// Delivery is how NAS delivers the job's fires: "direct" (under the
	// job's cron key, which is never shown) or "nas". The server always
	// sets it; InfoOf leaves it out.
	Delivery string `json:"delivery,omitempty"`
}

// PauseRequest is the body of POST /api/jobs/{id}/pause.
type PauseRequest struct {
	Reason string `json:"reason"`
}

// RunRequest is the body of POST /api/jobs/{id}/run.
type RunRequest struct {
	// Force runs even if the idempotency window has a successful run.
	Force bool `json:"force"`
	// Wait answers once the run has ended, with the run.
	Wait bool `json:"wait"`
}

// RunStarted answers POST /api/jobs/{id}/run without wait.
type RunStarted struct {
	// Status is accepted (the run started or was consumed: see Skipped and
	// Queued) or duplicate.
	Status  string `json:"status"`
	RunID   string `json:"run_id,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Skipped bool   `json:"skipped,omitempty"`
	Queued  bool   `json:"queued,omitempty"`
}

// Removed answers DELETE /api/jobs/{id}.
type Removed struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

// JobList answers GET /api/jobs.
type JobList struct {
	Jobs []JobInfo `json:"jobs"`
}

// info is job j as the API answers it: InfoOf, and for a workflow its
// dependencies' statuses now (left out when the ledger cannot be read).
func (s *Server) info(ctx context.Context, j *job.Job) JobInfo {
	in := InfoOf(s.rt, j)
	in.Delivery = cronkeys.NAS
	if s.keys != nil {
		in.Delivery = s.keys.Delivery(j.ID)
	}
	if j.Workflow != nil {
		if deps, err := s.rt.Dependencies(ctx, j, time.Now()); err == nil {
			in.Dependencies = deps
		}
	}
	return in
}

// JobKindPlain is JobInfo.JobKind of a plain job.
const JobKindPlain = "plain"

// InfoOf is job j of rt as the API answers it: its view, its job kind and
// its next three fires, in its zone.
func InfoOf(rt *agent.Runtime, j *job.Job) JobInfo {
	in := JobInfo{JobView: rt.View(j), JobKind: j.JobKind, NextFires: []time.Time{}}
	if in.JobKind == job.JobKindPlain {
		in.JobKind = JobKindPlain
	}
	if j.NextRunAt != nil {
		if sched, err := rt.Schedule(j); err == nil {
			in.NextFires = agent.Fires(sched, j.NextRunAt.Add(-time.Nanosecond), nextFires)
		}
	}
	return in
}

// jobError maps the runtime's errors to the API's.
func jobError(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "%s", err.Error())
	case errors.Is(err, store.ErrExists):
		return contract.Errorf(http.StatusConflict, CodeConflict, "%s", err.Error())
	case errors.Is(err, agent.ErrInvalidJob), errors.Is(err, notify.ErrInvalidTarget), errors.Is(err, notify.ErrAddressNotAllowed):
		return contract.Errorf(http.StatusUnprocessableEntity, CodeInvalidJob, "%s", err.Error())
	case errors.Is(err, store.ErrLockTimeout):
		return &contract.Error{Status: http.StatusServiceUnavailable, Code: contract.CodeUnavailable,
			Description: "the job store is busy; try again", RetryAfter: time.Second}
	case errors.Is(err, chain.ErrExpired):
		return contract.Errorf(http.StatusConflict, CodeChainExpired, "%s", err.Error())
	case errors.Is(err, chain.ErrClosed):
		return contract.Errorf(http.StatusConflict, CodeChainClosed, "%s", err.Error())
	}
	return err
}

// Error codes of the local API beside contract's.
const (
	// CodeInvalidJob (422): the job spec or change is not valid.
	CodeInvalidJob = "invalid_job"
	// CodeConflict (409): the id is taken, or the run is not live here, or
	// the job cannot run now.
	CodeConflict = "conflict"
	// CodeChainClosed (409): a manual run of a chain step whose chain is
	// closed or gone; the step was recorded skipped, not run.
	CodeChainClosed = "chain_closed"
	// CodeChainExpired (409): a manual run of a chain step whose chain
	// has expired; the step was recorded skipped, not run, and the chain
	// closed "expired".
	CodeChainExpired = "chain_expired"
)

// jobID reads and checks the {id} path parameter.
func jobID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !contract.ValidJobID(id) {
		return "", contract.BadRequest(contract.CodeInvalidJobID, "job id %q must match ^[A-Za-z0-9._-]{1,128}$", id)
	}
	return id, nil
}

// answer is job j as the API answers it, its env values redacted unless
// reveal.
func (s *Server) answer(ctx context.Context, j *job.Job, reveal bool) JobInfo {
	in := s.info(ctx, j)
	if !reveal {
		in = redacted(in)
	}
	return in
}

func (s *Server) listJobs(c echo.Context) error {
	reveal, err := revealEnv(c)
	if err != nil {
		return err
	}
	jobs, err := s.rt.Jobs(c.Request().Context())
	if err != nil {
		return jobError(err)
	}
	out := JobList{Jobs: make([]JobInfo, 0, len(jobs))}
	for i := range jobs {
		out.Jobs = append(out.Jobs, s.answer(c.Request().Context(), &jobs[i], reveal))
	}
	return writeJSON(c, http.StatusOK, out)
}

func (s *Server) showJob(c echo.Context) error {
	id, err := jobID(c)
	if err != nil {
		return err
	}
	reveal, err := revealEnv(c)
	if err != nil {
		return err
	}
	j, err := s.rt.Job(c.Request().Context(), id)
	if err != nil {
		return jobError(err)
	}
	return writeJSON(c, http.StatusOK, s.answer(c.Request().Context(), &j, reveal))
}

func (s *Server) addJob(c echo.Context) error {
	reveal, err := revealEnv(c)
	if err != nil {
		return err
	}
	var w JobSpec
	if err := decode(c, &w); err != nil {
		return err
	}
	if err := checkNoPlaceholder(&w.Payload); err != nil {
		return err
	}
	j, _, err := s.rt.AddJob(c.Request().Context(), w.Spec())
	if err != nil {
		return jobError(err)
	}
	return writeJSON(c, http.StatusCreated, s.answer(c.Request().Context(), &j, reveal))
}

func (s *Server) editJob(c echo.Context) error {
	id, err := jobID(c)
	if err != nil {
		return err
	}
	reveal, err := revealEnv(c)
	if err != nil {
		return err
	}
	var w JobPatch
	if err := decode(c, &w); err != nil {
		return err
	}
	if err := checkNoPlaceholder(w.Payload); err != nil {
		return err
	}
	j, _, err := s.rt.EditJob(c.Request().Context(), id, w.Patch())
	if err != nil {
		return jobError(err)
	}
	return writeJSON(c, http.StatusOK, s.answer(c.Request().Context(), &j, reveal))
}

// change answers a change of one job made by do.
func (s *Server) change(c echo.Context, do func(ctx context.Context, id string) (job.Job, error)) error {
	id, err := jobID(c)
	if err != nil {
		return err
	}
	reveal, err := revealEnv(c)
	if err != nil {
		return err
	}
	j, err := do(c.Request().Context(), id)
	if err != nil {
		return jobError(err)
	}
	return writeJSON(c, http.StatusOK, s.answer(c.Request().Context(), &j, reveal))
}

func (s *Server) pauseJob(c echo.Context) error {
	var req PauseRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	return s.change(c, func(ctx context.Context, id string) (job.Job, error) { return s.rt.Pause(ctx, id, req.Reason) })
}

func (s *Server) resumeJob(c echo.Context) error {
	return s.change(c, s.rt.Resume)
}

func (s *Server) removeJob(c echo.Context) error {
	id, err := jobID(c)
	if err != nil {
		return err
	}
	if err := s.rt.Remove(c.Request().Context(), id); err != nil {
		return jobError(err)
	}
	return writeJSON(c, http.StatusOK, Removed{ID: id, Removed: true})
}

func (s *Server) runJob(c echo.Context) error {
	id, err := jobID(c)
	if err != nil {
		return err
	}
	var req RunRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	ctx := c.Request().Context()
	started := time.Now()
	res, err := s.rt.RunNow(ctx, id, agent.RunOptions{Force: req.Force})
	if err != nil {
		return jobError(err)
	}
	switch res.Status {
	case agent.FireGone:
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no job %q", id)
	case agent.FireBusy:
		return &contract.Error{Status: http.StatusConflict, Code: CodeConflict, RetryAfter: res.RetryAfter,
			Description: fmt.Sprintf("cannot run now: %s", res.Reason)}
	}
	if !req.Wait || res.RunID == "" {
		return writeJSON(c, http.StatusAccepted, RunStarted{Status: string(res.Status), RunID: res.RunID,
			Reason: res.Reason, Skipped: res.Skipped, Queued: res.Queued})
	}
	run, err := s.rt.Wait(ctx, res.RunID, started)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, s.runInfo(run))
}
