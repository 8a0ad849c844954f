package ledger

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/chronoscron/chronos/internal/atomicfile"
)

// State is the state a ledger line records.
type State string

// Run states. claimed and running are in progress; the others end a run.
const (
	StateClaimed     State = "claimed"
	StateRunning     State = "running"
	StateSucceeded   State = "succeeded"
	StateFailed      State = "failed"
	StateSkipped     State = "skipped"
	StateMissed      State = "missed"
	StateInterrupted State = "interrupted"
	StateDuplicate   State = "duplicate"
	// StatePartial ends a fanout parent whose failed children stayed within
	// its partial_tolerance (some failed): it counts as a success.
	StatePartial State = "partial"
	// StateCancelled ends a run stopped on request (runs cancel, the local
	// API's run cancel): distinct from failed (the job's own outcome) and
	// interrupted (its agent stopped or died).
	StateCancelled State = "cancelled"
)

// Roles of the runs of a fanout: the parent run, one child per item and
// the reducer. A run of any other job has no role.
const (
	RoleParent  = "parent"
	RoleChild   = "child"
	RoleReducer = "reducer"
)

// Succeeded reports whether s ends a run that counts as a success:
// succeeded, or partial (a fanout within its tolerance).
func (s State) Succeeded() bool { return s == StateSucceeded || s == StatePartial }

// States of a notification line (Kind KindNotification): the notification
// was delivered, or given up on.
const (
	StateSent State = "sent"
	StateDead State = "dead"
)

// KindNotification marks a line about a notification of a run rather than
// about the run itself. Such lines never fold into a Run.
const KindNotification = "notification"

// Terminal reports whether s ends a run.
func (s State) Terminal() bool { return s != StateClaimed && s != StateRunning }

// Entry is one ledger line.
type Entry struct {
	Time       time.Time `json:"time"`
	RunID      string    `json:"run_id"`
	JobID      string    `json:"job_id"`
	State      State     `json:"state"`
	Slot       time.Time `json:"slot"`
	Trigger    string    `json:"trigger,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`
	LatenessMS int64     `json:"lateness_ms"`
	Reason     string    `json:"reason,omitempty"`
	Owner      string    `json:"owner,omitempty"`
	Token      uint64    `json:"token,omitempty"`
	// Runner is the job's payload kind (shell, http): it says whether
	// ExitCode is an exit status or an HTTP status.
	Runner    string `json:"runner,omitempty"`
	Output    string `json:"output,omitempty"`
	ExitCode  int    `json:"exit_code,omitempty"`
	Error     string `json:"error,omitempty"`
	Forced    bool   `json:"forced,omitempty"`
	Discarded bool   `json:"discarded,omitempty"`
	// Kind is empty on a run's lines and KindNotification on a line
	// recording a notification of run RunID sent or dead (State).
	Kind string `json:"kind,omitempty"`
	// Notification, Event and Target name that notification: its id, its
	// event and where it went (kind and destination).
	Notification string `json:"notification,omitempty"`
	Event        string `json:"event,omitempty"`
	Target       string `json:"target,omitempty"`
	// ParentRunID, Item and Role place the run in a fanout's run graph:
	// the parent's run id and the child's item (children and the reducer),
	// and the run's role (RoleParent, RoleChild, RoleReducer).
	ParentRunID string `json:"parent_run_id,omitempty"`
	Item        string `json:"item,omitempty"`
	Role        string `json:"role,omitempty"`
	// Chain is set on the lines of a chain step's runs and on chain lines
	// (Kind KindChain): the chain and the step's place in it.
	Chain *ChainRef `json:"chain,omitempty"`
}

// Ledger appends to and reads the runs directory.
type Ledger struct {
	dir   string
	obs   observers
	syncs groupSync
	fol   follower
}

// Open returns the ledger in dir (created if needed).
func Open(dir string) (*Ledger, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: create %s: %w", dir, err)
	}
	return &Ledger{dir: dir}, nil
}

// Dir returns the runs directory.
func (l *Ledger) Dir() string { return l.dir }

const dayLayout = "2006-01-02"

func (l *Ledger) dayFile(t time.Time) string {
	return filepath.Join(l.dir, t.UTC().Format(dayLayout)+".jsonl")
}

// Append writes each entry as one line and returns once all are durable.
// Entries of one day file go out in one write and one sync (a fire's claim
// and its run's start share them); a failed write or sync fails the call,
// and lines written before it may or may not be durable. Time, run id, job
// id and state must be set on every entry: otherwise nothing is written.
func (l *Ledger) Append(ctx context.Context, es ...Entry) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	lines := make([][]byte, len(es))
	for i, e := range es {
		if e.Time.IsZero() || e.RunID == "" || e.JobID == "" || e.State == "" {
			return errors.New("ledger: entry needs time, run id, job id and state")
		}
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("ledger: encode: %w", err)
		}
		lines[i] = append(b, '\n')
	}
	for i := 0; i < len(es); {
		path := l.dayFile(es[i].Time)
		var b []byte
		n := i
		for ; n < len(es) && l.dayFile(es[n].Time) == path; n++ {
			b = append(b, lines[n]...)
		}
		if err := l.appendDay(path, b); err != nil {
			return err
		}
		for _, e := range es[i:n] {
			l.obs.notify(e)
		}
		i = n
	}
	return nil
}

// appendDay writes b, whole lines, to the day file at path and syncs it.
func (l *Ledger) appendDay(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("ledger: open: %w", err)
	}
	lead := 0
	if torn, err := endsTorn(f); err != nil {
		f.Close()
		return fmt.Errorf("ledger: append: %w", err)
	} else if torn {
		// A crash left a line without its newline: end it, so these lines
		// stay whole (readers skip the torn one).
		b, lead = append([]byte{'\n'}, b...), 1
	}
	if err := l.fol.write(f, b, lead); err != nil {
		f.Close()
		return fmt.Errorf("ledger: append: %w", err)
	}
	gs := l.syncs.file(f.Name())
	if err := gs.sync(f, gs.wrote(), atomicfile.DataSync); err != nil {
		f.Close()
		return fmt.Errorf("ledger: sync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ledger: close: %w", err)
	}
	return nil
}

// Run is the fold of all lines of one run id.
type Run struct {
	RunID      string    `json:"run_id"`
	JobID      string    `json:"job_id"`
	State      State     `json:"state"`
	Slot       time.Time `json:"slot"`
	Trigger    string    `json:"trigger,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`
	LatenessMS int64     `json:"lateness_ms"`
	Reason     string    `json:"reason,omitempty"`
	Owner      string    `json:"owner,omitempty"`
	Token      uint64    `json:"token,omitempty"`
	Runner     string    `json:"runner,omitempty"`
	Output     string    `json:"output,omitempty"`
	ExitCode   int       `json:"exit_code,omitempty"`
	Error      string    `json:"error,omitempty"`
	Forced     bool      `json:"forced,omitempty"`
	Discarded  bool      `json:"discarded,omitempty"`
	FirstAt    time.Time `json:"first_at"`
	LastAt     time.Time `json:"last_at"`
	// StartedAt is when the latest attempt started running (zero if no
	// attempt ran); DurationMS how long it ran, set once it ended.
	StartedAt  time.Time `json:"started_at,omitzero"`
	DurationMS *int64    `json:"duration_ms,omitempty"`
	States     []State   `json:"states"`
	// ParentRunID, Item and Role are the run's place in a fanout (see
	// Entry).
	ParentRunID string `json:"parent_run_id,omitempty"`
	Item        string `json:"item,omitempty"`
	Role        string `json:"role,omitempty"`

	ended map[uint64]bool // tokens whose attempt has a terminal line
}

func (r *Run) apply(e Entry) {
	if r.RunID == "" {
		r.RunID, r.JobID, r.FirstAt = e.RunID, e.JobID, e.Time
		r.Slot, r.Trigger, r.Attempt, r.LatenessMS = e.Slot, e.Trigger, e.Attempt, e.LatenessMS
		r.ParentRunID, r.Item, r.Role = e.ParentRunID, e.Item, e.Role
	}
	r.States = append(r.States, e.State)
	// A discarded completion never overrides a recorded end, and a late
	// line of an attempt that already ended (its running line written after
	// it was replaced) does not reopen it.
	if r.State != "" && r.State.Terminal() && (e.Discarded || (!e.State.Terminal() && r.ended[e.Token])) {
		return
	}
	if e.State.Terminal() && !e.Discarded {
		if r.ended == nil {
			r.ended = map[uint64]bool{}
		}
		r.ended[e.Token] = true
	}
	r.State, r.LastAt = e.State, e.Time
	if e.State == StateRunning {
		r.StartedAt, r.DurationMS = e.Time, nil
	} else if e.State.Terminal() && !r.StartedAt.IsZero() && !e.Discarded {
		d := max(e.Time.Sub(r.StartedAt).Milliseconds(), 0)
		r.DurationMS = &d
	}
	if e.Runner != "" {
		r.Runner = e.Runner
	}
	if e.Reason != "" {
		r.Reason = e.Reason
	}
	if e.Owner != "" {
		r.Owner = e.Owner
	}
	if e.Token != 0 {
		r.Token = e.Token
	}
	if e.Attempt > r.Attempt {
		r.Attempt = e.Attempt
	}
	if e.Output != "" {
		r.Output = e.Output
	}
	if e.ExitCode != 0 {
		r.ExitCode = e.ExitCode
	}
	if e.Error != "" {
		r.Error = e.Error
	}
	r.Forced = r.Forced || e.Forced
	r.Discarded = e.Discarded
}

// Filter selects runs. Zero fields select everything.
type Filter struct {
	JobID string
	// Since drops runs whose first line is before it (and day files before
	// its day).
	Since time.Time
	// Limit keeps the newest Limit runs (0: all).
	Limit int
	// ParentRunID keeps only the children and reducer of that fanout
	// parent run.
	ParentRunID string
}

// Entries returns every line since filter.Since (inclusive of its day) for
// filter.JobID, in file order.
func (l *Ledger) Entries(ctx context.Context, f Filter) ([]Entry, error) {
	days, err := l.days()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, d := range days {
		if !f.Since.IsZero() && d < f.Since.UTC().Format(dayLayout) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		es, err := readDay(filepath.Join(l.dir, d+".jsonl"))
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if f.JobID != "" && e.JobID != f.JobID {
				continue
			}
			if f.ParentRunID != "" && e.ParentRunID != f.ParentRunID {
				continue
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Runs folds the lines of each run and returns runs ordered by their first
// line, oldest first, keeping the newest filter.Limit. Notification lines
// are left out.
func (l *Ledger) Runs(ctx context.Context, f Filter) ([]Run, error) {
	es, err := l.Entries(ctx, Filter{JobID: f.JobID, Since: f.Since, ParentRunID: f.ParentRunID})
	if err != nil {
		return nil, err
	}
	byID := map[string]*Run{}
	var order []*Run
	for _, e := range es {
		if e.Kind != "" {
			continue
		}
		r := byID[e.RunID]
		if r == nil {
			r = &Run{}
			byID[e.RunID] = r
			order = append(order, r)
		}
		r.apply(e)
	}
	out := make([]Run, 0, len(order))
	for _, r := range order {
		if !f.Since.IsZero() && r.FirstAt.Before(f.Since) {
			continue
		}
		out = append(out, *r)
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].FirstAt.Before(out[b].FirstAt) })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, nil
}

// Has reports whether a line for run id exists in a day file on or after
// since's day.
func (l *Ledger) Has(ctx context.Context, runID string, since time.Time) (bool, error) {
	es, err := l.Entries(ctx, Filter{Since: since})
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if e.RunID == runID {
			return true, nil
		}
	}
	return false, nil
}

func (l *Ledger) days() ([]string, error) { return listDays(l.dir) }

// listDays returns the days of the day files in dir, oldest first.
func listDays(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ledger: list: %w", err)
	}
	var days []string
	for _, e := range ents {
		name := e.Name()
		d, ok := strings.CutSuffix(name, ".jsonl")
		if !ok || e.IsDir() {
			continue
		}
		if _, err := time.Parse(dayLayout, d); err != nil {
			continue
		}
		days = append(days, d)
	}
	sort.Strings(days)
	return days, nil
}

// endsTorn reports whether f is not empty and does not end with a newline.
func endsTorn(f *os.File) (bool, error) {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false, err
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], fi.Size()-1); err != nil {
		return false, err
	}
	return last[0] != '\n', nil
}

// lineStart is how every line Append writes begins.
var lineStart = []byte(`{"time":`)

// decodeLine decodes one ledger line. A line torn by a crash mid-write is
// skipped (ok false): it is a cut-off JSON object, alone on its line, or, in
// files written before appends ended torn lines, followed on the same line
// by a whole line, which is recovered.
func decodeLine(raw []byte) (e Entry, ok bool, err error) {
	err = json.Unmarshal(raw, &e)
	if err == nil {
		return e, true, nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) && se.Offset >= int64(len(raw)) && (bytes.HasPrefix(raw, lineStart) || bytes.HasPrefix(lineStart, raw)) {
		return Entry{}, false, nil // cut off: unexpected end of JSON input
	}
	if i := bytes.LastIndex(raw, lineStart); i > 0 && bytes.HasPrefix(raw, lineStart) {
		var whole Entry
		if json.Unmarshal(raw[i:], &whole) == nil {
			return whole, true, nil
		}
	}
	return Entry{}, false, err
}

// readDay reads one day file. A torn line (a crash mid-write on a filesystem
// that allowed it) is ignored, as decodeLine says; any other bad line is an
// error.
func readDay(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: read: %w", err)
	}
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		raw := sc.Bytes()
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		e, ok, err := decodeLine(raw)
		if err != nil {
			if !bytes.HasSuffix(b, []byte("\n")) && bytes.HasSuffix(b, raw) {
				break
			}
			return nil, fmt.Errorf("ledger: %s line %d: %w", path, line, err)
		}
		if ok {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ledger: read %s: %w", path, err)
	}
	return out, nil
}

// Prune removes day files older than keep before now, and files under
// outputDir (if set) not modified within keep. It returns how many files it
// removed.
func (l *Ledger) Prune(ctx context.Context, now time.Time, keep time.Duration, outputDir string) (int, error) {
	if keep <= 0 {
		return 0, errors.New("ledger: retention must be positive")
	}
	cut := now.Add(-keep)
	cutDay := cut.UTC().Format(dayLayout)
	days, err := l.days()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range days {
		if d >= cutDay {
			break
		}
		if err := os.Remove(filepath.Join(l.dir, d+".jsonl")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("ledger: prune: %w", err)
		}
		n++
	}
	if outputDir == "" {
		return n, nil
	}
	err = filepath.WalkDir(outputDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if info.ModTime().Before(cut) {
			if err := os.Remove(path); err == nil {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("ledger: prune output: %w", err)
	}
	return n, nil
}
