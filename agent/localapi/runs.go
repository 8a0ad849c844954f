package localapi

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/output"
	"github.com/chronoscron/chronos/contract"
)

// Bounds of GET /api/runs.
const (
	defaultRunLimit = 100
	maxRunLimit     = 1000
)

// runStates are the states a run can be in, for the status filter.
var runStates = []ledger.State{ledger.StateClaimed, ledger.StateRunning, ledger.StateSucceeded, ledger.StatePartial,
	ledger.StateFailed, ledger.StateSkipped, ledger.StateMissed, ledger.StateInterrupted, ledger.StateDuplicate,
	ledger.StateCancelled}

// RunInfo is a run as the API answers it: the fold of its ledger lines, and
// whether it is live in this agent (it can be cancelled).
type RunInfo struct {
	ledger.Run
	Live bool `json:"live"`
}

// RunDetail answers GET /api/runs/{id}: the run and its output, capped.
type RunDetail struct {
	RunInfo
	// OutputText is the output as it came, both streams in order.
	OutputText      string `json:"output_text"`
	OutputTruncated bool   `json:"output_truncated"`
	OutputError     string `json:"output_error,omitempty"`
	// StreamsApart says that StdoutText and StderrText hold the output's
	// standard output and standard error apart; false for a run recorded
	// as one stream (before the agent told them apart), shown as
	// OutputText only.
	StreamsApart bool   `json:"streams_apart"`
	StdoutText   string `json:"stdout_text,omitempty"`
	StderrText   string `json:"stderr_text,omitempty"`
}

// RunList answers GET /api/runs, newest first; NextCursor fetches the next
// (older) page.
type RunList struct {
	Runs       []RunInfo `json:"runs"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// CancelRequest is the body of POST /api/runs/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason"`
}

// CancelAnswer answers POST /api/runs/{id}/cancel: the stop is asked for;
// the run ends cancelled (see GET /api/runs/{id} or the event stream).
type CancelAnswer struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
}

func (s *Server) runInfo(r ledger.Run) RunInfo {
	return RunInfo{Run: r, Live: s.rt.Live(r.RunID)}
}

// runQuery is the parsed query of GET /api/runs.
type runQuery struct {
	filter ledger.Filter
	status ledger.State
	limit  int
	after  *cursor
	// topLevel leaves out fanout children and reducers.
	topLevel bool
}

func parseRunQuery(c echo.Context) (runQuery, error) {
	q := runQuery{limit: defaultRunLimit}
	qs := c.QueryParams()
	if id := qs.Get("job_id"); id != "" {
		if !contract.ValidJobID(id) {
			return q, contract.BadRequest(contract.CodeInvalidJobID, "job_id %q must match ^[A-Za-z0-9._-]{1,128}$", id)
		}
		q.filter.JobID = id
	}
	if id := qs.Get("parent_run_id"); id != "" {
		if !validRunID(id) {
			return q, contract.BadRequest(contract.CodeInvalidRequest, "parent_run_id %q is not a valid run id", id)
		}
		q.filter.ParentRunID = id
	}
	if st := qs.Get("status"); st != "" {
		q.status = ledger.State(st)
		if !knownState(q.status) {
			return q, contract.BadRequest(contract.CodeInvalidRequest, "status %q is not one of %v", st, runStates)
		}
	}
	if since := qs.Get("since"); since != "" {
		t, err := ledger.ParseSince(since, time.Now())
		if err != nil {
			return q, contract.BadRequest(contract.CodeInvalidRequest, "since: %v", strings.TrimPrefix(err.Error(), "--since "))
		}
		q.filter.Since = t
	}
	switch v := qs.Get("top_level"); v {
	case "", "false":
	case "true":
		q.topLevel = true
	default:
		return q, contract.BadRequest(contract.CodeInvalidRequest, "top_level %q must be true or false", v)
	}
	if l := qs.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxRunLimit {
			return q, contract.BadRequest(contract.CodeInvalidRequest, "limit %q must be a whole number from 1 to %d", l, maxRunLimit)
		}
		q.limit = n
	}
	if cs := qs.Get("cursor"); cs != "" {
		cur, err := parseCursor(cs)
		if err != nil {
			return q, contract.BadRequest(contract.CodeInvalidCursor, "cursor %q is not one this API issued", cs)
		}
		q.after = &cur
	}
	return q, nil
}

func knownState(st ledger.State) bool {
	for _, k := range runStates {
		if k == st {
			return true
		}
	}
	return false
}

// cursor is the position after the last run of a page: runs are ordered
// by first line, newest first, then by id.
type cursor struct {
	first time.Time
	runID string
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.first.UTC().Format(time.RFC3339Nano) + "|" + c.runID))
}

func parseCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, err
	}
	ts, id, ok := strings.Cut(string(b), "|")
	if !ok || id == "" {
		return cursor{}, errors.New("cursor: malformed")
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return cursor{}, err
	}
	return cursor{first: t, runID: id}, nil
}

// older reports whether run r comes after c in newest-first order.
func (c cursor) older(r *ledger.Run) bool {
	if !r.FirstAt.Equal(c.first) {
		return r.FirstAt.Before(c.first)
	}
	return r.RunID < c.runID
}

func (s *Server) listRuns(c echo.Context) error {
	q, err := parseRunQuery(c)
	if err != nil {
		return err
	}
	runs, err := s.rt.Ledger().Runs(c.Request().Context(), q.filter)
	if err != nil {
		return err
	}
	sort.SliceStable(runs, func(a, b int) bool {
		if !runs[a].FirstAt.Equal(runs[b].FirstAt) {
			return runs[a].FirstAt.After(runs[b].FirstAt)
		}
		return runs[a].RunID > runs[b].RunID
	})
	out := RunList{Runs: []RunInfo{}}
	for i := range runs {
		r := &runs[i]
		if (q.status != "" && r.State != q.status) || (q.after != nil && !q.after.older(r)) || (q.topLevel && r.ParentRunID != "") {
			continue
		}
		if len(out.Runs) == q.limit {
			last := out.Runs[len(out.Runs)-1]
			out.NextCursor = cursor{first: last.FirstAt, runID: last.RunID}.String()
			break
		}
		out.Runs = append(out.Runs, s.runInfo(*r))
	}
	return writeJSON(c, http.StatusOK, out)
}

// validRunID reports whether id can name a run.
func validRunID(id string) bool {
	return id != "" && len(id) <= 200 && !strings.ContainsAny(id, "/\\")
}

// RunChildren answers GET /api/runs/{id}/children: the children of a
// fanout parent run in item order, then its reducer; each carries its item
// and role. A run that is not a fanout parent has none.
type RunChildren struct {
	Parent   RunInfo   `json:"parent"`
	Children []RunInfo `json:"children"`
}

func (s *Server) runChildren(c echo.Context) error {
	id := c.Param("id")
	if !validRunID(id) {
		return contract.BadRequest(contract.CodeInvalidRequest, "run id %q is not valid", id)
	}
	parent, kids, err := s.rt.RunGraph(c.Request().Context(), id)
	if errors.Is(err, agent.ErrRunUnknown) {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no run %q", id)
	}
	if err != nil {
		return err
	}
	out := RunChildren{Parent: s.runInfo(parent), Children: make([]RunInfo, 0, len(kids))}
	for _, k := range kids {
		out.Children = append(out.Children, s.runInfo(k))
	}
	return writeJSON(c, http.StatusOK, out)
}

// findRun returns the run with id from the ledger.
func (s *Server) findRun(c echo.Context) (ledger.Run, error) {
	id := c.Param("id")
	if !validRunID(id) {
		return ledger.Run{}, contract.BadRequest(contract.CodeInvalidRequest, "run id %q is not valid", id)
	}
	runs, err := s.rt.Ledger().Runs(c.Request().Context(), ledger.Filter{})
	if err != nil {
		return ledger.Run{}, err
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].RunID == id {
			return runs[i], nil
		}
	}
	return ledger.Run{}, contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no run %q", id)
}

func (s *Server) showRun(c echo.Context) error {
	r, err := s.findRun(c)
	if err != nil {
		return err
	}
	d := RunDetail{RunInfo: s.runInfo(r)}
	if r.Output != "" {
		if err := s.readOutput(r.Output, &d); err != nil {
			d.OutputError = err.Error()
		}
	}
	return writeJSON(c, http.StatusOK, d)
}

// readOutput reads a run's output file (relative to the home, under
// output/), at most the last OutputCap bytes, into d: as it came and, when
// the file's streams file says which bytes came from standard error, the
// two streams apart.
func (s *Server) readOutput(rel string, d *RunDetail) error {
	home := s.rt.Store().Home()
	root := filepath.Join(home, "output")
	path := filepath.Join(home, filepath.Clean(rel))
	if !strings.HasPrefix(path, root+string(filepath.Separator)) {
		return fmt.Errorf("output path %q is outside the output directory", rel)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the run printed nothing
	}
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	var base int64
	if d.OutputTruncated = st.Size() > s.o.OutputCap; d.OutputTruncated {
		base = st.Size() - s.o.OutputCap
		if _, err := f.Seek(base, io.SeekStart); err != nil {
			return fmt.Errorf("output: %w", err)
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, s.o.OutputCap))
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	d.OutputText = strings.ToValidUTF8(string(b), "\uFFFD")
	streams, ok, err := output.ReadStreams(path)
	if err != nil || !ok {
		return err
	}
	stdout, stderr := streams.Split(b, base)
	d.StreamsApart = true
	d.StdoutText, d.StderrText = strings.ToValidUTF8(string(stdout), "\uFFFD"), strings.ToValidUTF8(string(stderr), "\uFFFD")
	return nil
}

func (s *Server) cancelRun(c echo.Context) error {
	var req CancelRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	r, err := s.findRun(c)
	if err != nil {
		return err
	}
	reason := "cancelled through the local API"
	if strings.TrimSpace(req.Reason) != "" {
		reason = strings.TrimSpace(req.Reason)
	}
	if err := s.rt.CancelRun(c.Request().Context(), r.RunID, reason); err != nil {
		if errors.Is(err, agent.ErrRunNotRunning) {
			return contract.Errorf(http.StatusConflict, CodeConflict, "run %s is %s, not in progress in this agent", r.RunID, r.State)
		}
		return err
	}
	return writeJSON(c, http.StatusAccepted, CancelAnswer{RunID: r.RunID, Status: "cancelling"})
}

func (s *Server) status(c echo.Context) error {
	st, err := s.o.Status(c.Request().Context())
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, st)
}
