package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/clockskew"
	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/secretfile"
)

// statusTimeout bounds the calls to NAS and the key set of one Status.
const statusTimeout = 20 * time.Second

// Report is the state of an agent's home, as `chronos agent status`
// reports it (its --json output).
type Report struct {
	Provider string   `json:"provider"`
	Why      string   `json:"why"`
	Reasons  []string `json:"reasons,omitempty"`
	Home     string   `json:"home"`

	// Agent is the serving agent as it last recorded itself; Running says
	// whether its process is alive and has not stopped.
	Agent   *provider.AgentState `json:"agent,omitempty"`
	Running bool                 `json:"running"`

	// StoreWritable says whether the home can be written now (jobs.json
	// and the ledger); StoreError says why not.
	StoreWritable bool   `json:"store_writable"`
	StoreError    string `json:"store_error,omitempty"`

	// ExposedSecretFiles are the agent's secret files (see SecretFiles)
	// that their group or others may read, each with the fix.
	ExposedSecretFiles []secretfile.Exposure `json:"exposed_secret_files,omitempty"`

	// InSync is true when NAS holds exactly the desired fires (chronos only).
	InSync   *bool                 `json:"in_sync,omitempty"`
	NAS      *provider.Observation `json:"nas,omitempty"`
	NASError string                `json:"nas_error,omitempty"`
	// Desired are the fires the agent wants (also under the built-in timer).
	Desired []provider.Arm `json:"desired"`
	// Delivery is each job's delivery mode by job id: "direct" (its fires
	// are signed under its own cron key, which is never shown) or "nas".
	Delivery map[string]string `json:"delivery"`

	LastReconcile *provider.Result      `json:"last_reconcile,omitempty"`
	LastSuccessAt *time.Time            `json:"last_success_at,omitempty"`
	Counts        provider.Counts       `json:"counts"`
	Errors        []provider.ErrorEntry `json:"errors,omitempty"`

	JWKS *JWKSStatus `json:"jwks,omitempty"`

	// ClockSkew is NAS's clock against this host's, measured now from the
	// Date of NAS's answers (chronos only, when NAS answered).
	ClockSkew *ClockSkew `json:"clock_skew,omitempty"`

	LastFires []ledger.Run `json:"last_fires"`

	// Chains are the open chains; Breakers the class breakers open now.
	Chains   []chain.Chain   `json:"chains"`
	Breakers []chain.Breaker `json:"breakers"`
}

// JWKSStatus is the health of NAS's key set: fetched now, and as the
// serving agent last saw it.
type JWKSStatus struct {
	URL       string           `json:"url"`
	Reachable bool             `json:"reachable"`
	Keys      int              `json:"keys"`
	Error     string           `json:"error,omitempty"`
	Agent     *fireauth.Health `json:"agent,omitempty"`
}

// ClockSkew is NAS's clock against the host's.
type ClockSkew struct {
	// Seconds is NAS's clock minus the host's: positive when the host's
	// clock is behind. The agent judges fire tokens and slots by NAS's
	// clock as it estimates it; its /metrics reports the estimate as
	// chronos_agent_clock_skew_seconds.
	Seconds float64 `json:"seconds"`
	// Direction says it in words.
	Direction string `json:"direction"`
}

// StatusOptions say what Status looks at.
type StatusOptions struct {
	// Config is the agent's config; Home names the home to report on.
	Config provider.Config
	// Decision is the provider in use; the zero value means
	// provider.Decide(Config).
	Decision provider.Decision
	// Fires is how many recent fires to report (0: none).
	Fires int
	// Now is the host's clock, against which NAS's is measured; default
	// time.Now.
	Now func() time.Time
}

// Status reports on the home of o.Config: the provider and why, the serving
// agent, whether the store can be written, the desired fires against what
// NAS holds (asked live under the chronos provider), the last reconcile and
// recent errors, the key set's health and the last fires. It is a read: it
// changes nothing at NAS nor in the home. Failed fires NAS reports are shown
// pending (Observation.FailedFires); recording and acknowledging them is the
// serving agent's reconcile.
func Status(ctx context.Context, o StatusOptions) (Report, error) {
	if o.Decision.Provider == "" {
		o.Decision = provider.Decide(o.Config)
	}
	loc, err := o.Config.Location()
	if err != nil {
		return Report{}, fmt.Errorf("agent status: %w", err)
	}
	rt, err := agent.Open(ctx, agent.Config{Home: o.Config.Home, Location: loc, MaxJobsFile: o.Config.JobsFileLimit()})
	if err != nil {
		return Report{}, fmt.Errorf("agent status: %w", err)
	}
	defer func() { _ = rt.Close(context.WithoutCancel(ctx)) }()

	r := Report{Provider: o.Decision.Provider, Why: o.Decision.Why(), Reasons: o.Decision.Reasons, Home: o.Config.Home}
	r.ExposedSecretFiles = ExposedSecretFiles(o.Config)
	state := r.readHome(rt)
	r.readChains(ctx, rt)
	if err := r.readDelivery(ctx, rt); err != nil {
		return r, fmt.Errorf("agent status: %w", err)
	}
	desired, err := rt.Desired(ctx)
	if err != nil {
		return r, fmt.Errorf("agent status: %w", err)
	}
	for _, d := range desired {
		r.Desired = append(r.Desired, provider.Arm{JobID: d.JobID, FireAt: d.FireAt.UTC()})
	}
	if o.Decision.Chronos() {
		if err := r.askNAS(ctx, rt, o.Config, state, o.Now); err != nil {
			return r, err
		}
	}
	if o.Fires > 0 {
		if r.LastFires, err = rt.Ledger().Runs(ctx, ledger.Filter{Limit: o.Fires}); err != nil {
			return r, fmt.Errorf("agent status: %w", err)
		}
	}
	// Both lists are present in the JSON even when empty.
	if r.LastFires == nil {
		r.LastFires = []ledger.Run{}
	}
	if r.Desired == nil {
		r.Desired = []provider.Arm{}
	}
	return r, nil
}

// readDelivery fills in each job's delivery mode from the home's key store.
func (r *Report) readDelivery(ctx context.Context, rt *agent.Runtime) error {
	jobs, err := rt.Jobs(ctx)
	if err != nil {
		return err
	}
	keys, err := cronkeys.Open(r.Home, cronkeys.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	direct := keys.Deliveries()
	r.Delivery = make(map[string]string, len(jobs))
	for _, j := range jobs {
		r.Delivery[j.ID] = cronkeys.NAS
		if d, ok := direct[j.ID]; ok {
			r.Delivery[j.ID] = d
		}
	}
	return nil
}

// readHome fills in what the home records: the state file and whether the
// store can be written. It returns the state file.
func (r *Report) readHome(rt *agent.Runtime) provider.State {
	state, err := provider.ReadState(r.Home)
	if err != nil {
		r.Errors = append(r.Errors, provider.ErrorEntry{At: time.Now(), Op: "read state", Error: err.Error()})
	}
	if ok, err := rt.StoreWritable(); ok {
		r.StoreWritable = true
	} else {
		r.StoreError = err.Error()
	}
	r.Agent = state.Agent
	r.Running = state.Agent != nil && state.Agent.StoppedAt == nil && processAlive(state.Agent.PID)
	r.LastReconcile, r.LastSuccessAt, r.Counts = state.Last, state.LastSuccessAt, state.Counts
	r.Errors = append(r.Errors, state.Errors...)
	return state
}

// askNAS compares the desired fires with what NAS holds, measures NAS's
// clock against now (the host's) and fetches the key set.
func (r *Report) askNAS(ctx context.Context, rt *agent.Runtime, cfg provider.Config, state provider.State, now func() time.Time) error {
	ch := cfg.Cron.Chronos
	callCtx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	clock := clockskew.New(clockskew.Options{Local: now, Logger: slog.New(slog.DiscardHandler)})
	nc, err := newNASClient(ch, nil, 2, clock)
	if err != nil {
		return fmt.Errorf("agent status: %w", err)
	}
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{Source: rt, NAS: nc, CallbackURL: ch.CallbackURL, Home: cfg.Home, By: "status"})
	if err != nil {
		return fmt.Errorf("agent status: %w", err)
	}
	if obs, err := rec.Observe(callCtx); err != nil {
		r.NASError = err.Error()
	} else {
		r.NAS = &obs
		r.Desired = obs.Desired
		in := obs.Plan.InSync()
		r.InSync = &in
	}
	if clock.Known() {
		off := clock.Offset()
		r.ClockSkew = &ClockSkew{Seconds: off.Seconds(), Direction: clockskew.Direction(off)}
	}
	r.JWKS = probeJWKS(callCtx, ch.NASJWKSURL)
	if state.Agent != nil {
		r.JWKS.Agent = state.Agent.JWKS
	}
	return nil
}

// processAlive reports whether pid names a live process.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// probeJWKS fetches the key set now, with the verifier's limits.
func probeJWKS(ctx context.Context, url string) *JWKSStatus {
	s := &JWKSStatus{URL: url}
	client := fireauth.NewJWKSClient(fireauth.DefaultHTTPTimeout, fireauth.DefaultMaxJWKSBytes)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	resp, err := client.Do(req)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.Error = fmt.Sprintf("answered %d", resp.StatusCode)
		return s
	}
	var set contract.JWKS
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		s.Error = "not a key set: " + err.Error()
		return s
	}
	s.Reachable, s.Keys = true, len(set.Keys)
	if s.Keys == 0 {
		s.Error = "the key set is empty"
	}
	return s
}

// Line is one labelled line of a report's summary; a line without a label
// continues the one before.
type Line struct {
	Label string
	Text  string
}

// Summary returns the report's headline as labelled lines: the provider and
// why, the home, the store, the serving agent, the key set and NAS (or the
// built-in timer's desired fires).
func (r Report) Summary() []Line {
	lines := []Line{{"provider", fmt.Sprintf("%s (%s)", r.Provider, r.Why)}, {"home", r.Home}}
	if r.StoreWritable {
		lines = append(lines, Line{"store", "writable"})
	} else {
		lines = append(lines, Line{"store", "NOT writable: " + r.StoreError})
	}
	lines = append(lines, Line{"agent", r.agentText()})
	for _, e := range r.ExposedSecretFiles {
		lines = append(lines, Line{"secret", "WARNING: " + e.String()})
	}
	lines = append(lines, r.JWKS.lines()...)
	if c := r.ClockSkew; c != nil {
		text := "in step with NAS's (within a second)"
		if c.Seconds != 0 {
			text = fmt.Sprintf("%s by %s", c.Direction, time.Duration(math.Abs(c.Seconds)*float64(time.Second)).Round(time.Second))
		}
		if math.Abs(c.Seconds) > clockskew.DefaultWarnAbove.Seconds() {
			text += "; the agent follows NAS's clock, but fix the host's (NTP)"
		}
		lines = append(lines, Line{"clock", text})
	}
	switch {
	case r.NASError != "":
		lines = append(lines, Line{"nas", "cannot list armed fires: " + r.NASError})
	case r.NAS != nil:
		verdict := "in sync"
		if r.InSync == nil || !*r.InSync {
			verdict = "NOT in sync"
		}
		lines = append(lines, Line{"nas", fmt.Sprintf("desired %d, armed %d: %s", len(r.NAS.Desired), len(r.NAS.Armed), verdict)})
		if n := len(r.NAS.FailedFires); n > 0 {
			lines = append(lines, Line{"failed fires", fmt.Sprintf("%d at NAS not yet recorded: the serving agent records them missed and acknowledges them at its next reconcile", n)})
		}
	default:
		lines = append(lines, Line{"desired", fmt.Sprintf("%d fires (built-in timer)", len(r.Desired))})
	}
	return lines
}

// agentText says how the serving agent is.
func (r Report) agentText() string {
	switch a := r.Agent; {
	case a == nil:
		return "never started on this home"
	case r.Running:
		return fmt.Sprintf("running, pid %d, listening on %s, since %s", a.PID, a.Listen, FormatTime(a.StartedAt))
	case a.StoppedAt != nil:
		return fmt.Sprintf("stopped at %s (last pid %d, provider %s)", FormatTime(*a.StoppedAt), a.PID, a.Provider)
	default:
		return fmt.Sprintf("not running (pid %d is gone; it did not stop cleanly)", a.PID)
	}
}

// lines says how the key set is now and as the serving agent saw it.
func (j *JWKSStatus) lines() []Line {
	if j == nil {
		return nil
	}
	now := "unreachable: " + j.Error
	if j.Reachable {
		now = fmt.Sprintf("reachable, %d keys", j.Keys)
	}
	lines := []Line{{"jwks", j.URL + ": " + now}}
	if h := j.Agent; h != nil {
		seen := "not loaded"
		if h.Loaded {
			seen = fmt.Sprintf("loaded at %s, %d keys", FormatTime(h.LoadedAt), h.Keys)
		}
		if h.LastError != "" {
			seen += fmt.Sprintf("; %d failed fetches, last at %s: %s", h.Failures, FormatTime(h.LastErrorAt), h.LastError)
		}
		lines = append(lines, Line{"", "as the agent saw it: " + seen})
	}
	return lines
}

// PlanRow is one job's desired fire against the one NAS holds.
type PlanRow struct {
	JobID string
	// Delivery is the job's delivery mode: direct or nas.
	Delivery string
	Desired  string // the desired fire time, "-" when none
	Armed    string // the armed fire time, "-" when none
	State    string // what the next reconcile does about it
}

// PlanRows returns a row per job NAS was compared for (none when NAS was
// not asked).
func (r Report) PlanRows() []PlanRow {
	if r.NAS == nil {
		return nil
	}
	armedAt := map[string]provider.Arm{}
	for _, a := range r.NAS.Armed {
		armedAt[a.JobID] = a
	}
	var rows []PlanRow
	add := func(a provider.Arm, desired, armed, state string) {
		d := r.Delivery[a.JobID]
		if d == "" {
			d = cronkeys.NAS
		}
		rows = append(rows, PlanRow{JobID: a.JobID, Delivery: d, Desired: desired, Armed: armed, State: state})
	}
	pl := r.NAS.Plan
	for _, a := range pl.Unchanged {
		add(a, FormatTime(a.FireAt), FormatTime(a.FireAt), "armed")
	}
	for _, a := range pl.Provision {
		if cur, ok := armedAt[a.JobID]; ok {
			add(a, FormatTime(a.FireAt), FormatTime(cur.FireAt), "changed: to re-arm")
		} else {
			add(a, FormatTime(a.FireAt), "-", "missing: to arm")
		}
	}
	for _, a := range pl.Cancel {
		add(a, "-", FormatTime(a.FireAt), "orphan: to cancel")
	}
	for _, a := range pl.Delivering {
		add(a, "-", FormatTime(a.FireAt), "due: NAS is delivering it")
	}
	for _, a := range pl.Overdue {
		add(a, FormatTime(a.FireAt), "-", "overdue: misfire policy at the agent's next start")
	}
	return rows
}

// FormatTime formats t for a report: RFC 3339 in UTC, "-" for the zero time.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
