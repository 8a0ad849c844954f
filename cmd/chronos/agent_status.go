package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/contract"
)

type agentStatusOptions struct {
	config string
	home   string
	json   bool
	fires  int
}

func newAgentStatusCmd() *cobra.Command {
	var o agentStatusOptions
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the provider in use and why, desired vs armed, last fires and errors, JWKS health",
		Long: `Show the agent's state: which provider is in use and why; under the chronos
provider the desired fires against what NAS holds (asked live), the last
reconcile, its counters and recent errors, and the health of NAS's key set (as
the serving agent last saw it and fetched now); whether the home (jobs.json,
the ledger) can be written; and the last fires from the run ledger with their
outcomes. It changes nothing at NAS. Fires NAS reports as failed are recorded
in the ledger as missed, as a reconcile would.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgentStatus(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	configFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print JSON")
	c.Flags().StringVar(&o.home, "home", "", "the agent's home directory (overrides the config's home and $CHRONOS_HOME)")
	c.Flags().IntVar(&o.fires, "fires", 10, "how many recent fires to show")
	return c
}

// agentStatus is what `chronos agent status` reports.
type agentStatus struct {
	Provider string   `json:"provider"`
	Why      string   `json:"why"`
	Reasons  []string `json:"reasons,omitempty"`
	Home     string   `json:"home"`

	Agent   *provider.AgentState `json:"agent,omitempty"`
	Running bool                 `json:"running"`

	// StoreWritable says whether the home can be written now (jobs.json
	// and the ledger); StoreError says why not.
	StoreWritable bool   `json:"store_writable"`
	StoreError    string `json:"store_error,omitempty"`

	// InSync is true when NAS holds exactly the desired fires (chronos only).
	InSync   *bool                 `json:"in_sync,omitempty"`
	NAS      *provider.Observation `json:"nas,omitempty"`
	NASError string                `json:"nas_error,omitempty"`
	// Desired are the fires the agent wants (also under the built-in timer).
	Desired []provider.Arm `json:"desired"`

	LastReconcile *provider.Result      `json:"last_reconcile,omitempty"`
	LastSuccessAt *time.Time            `json:"last_success_at,omitempty"`
	Counts        provider.Counts       `json:"counts"`
	Errors        []provider.ErrorEntry `json:"errors,omitempty"`

	JWKS *jwksStatus `json:"jwks,omitempty"`

	LastFires []ledger.Run `json:"last_fires"`
}

type jwksStatus struct {
	URL       string           `json:"url"`
	Reachable bool             `json:"reachable"`
	Keys      int              `json:"keys"`
	Error     string           `json:"error,omitempty"`
	Agent     *fireauth.Health `json:"agent,omitempty"`
}

func runAgentStatus(ctx context.Context, o agentStatusOptions, out io.Writer) error {
	cfg, decision, err := loadAgentConfig(o.config, os.LookupEnv)
	if err != nil {
		return err
	}
	if o.home != "" {
		cfg.Home = o.home
	}
	loc, err := cfg.Location()
	if err != nil {
		return asUsage(err)
	}
	if o.fires < 0 {
		return usagef("agent status: --fires must not be negative")
	}
	rt, err := agent.Open(ctx, agent.Config{Home: cfg.Home, Location: loc})
	if err != nil {
		return fmt.Errorf("agent status: %w", err)
	}
	defer func() { _ = rt.Close(context.WithoutCancel(ctx)) }()

	st := agentStatus{Provider: decision.Provider, Why: decision.Why(), Reasons: decision.Reasons, Home: cfg.Home}
	state, err := provider.ReadState(cfg.Home)
	if err != nil {
		st.Errors = append(st.Errors, provider.ErrorEntry{At: time.Now(), Op: "read state", Error: err.Error()})
	}
	if ok, err := rt.StoreWritable(); ok {
		st.StoreWritable = true
	} else {
		st.StoreError = err.Error()
	}
	st.Agent = state.Agent
	st.Running = state.Agent != nil && state.Agent.StoppedAt == nil && processAlive(state.Agent.PID)
	st.LastReconcile, st.LastSuccessAt, st.Counts = state.Last, state.LastSuccessAt, state.Counts
	st.Errors = append(st.Errors, state.Errors...)

	desired, err := rt.Desired(ctx)
	if err != nil {
		return fmt.Errorf("agent status: %w", err)
	}
	for _, d := range desired {
		st.Desired = append(st.Desired, provider.Arm{JobID: d.JobID, FireAt: d.FireAt.UTC()})
	}

	if decision.Chronos() {
		ch := cfg.Cron.Chronos
		callCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		nc, err := nasclient.New(nasclient.Config{PortalURL: ch.PortalURL, AccessToken: ch.AccessToken, MaxAttempts: 2})
		if err != nil {
			return fmt.Errorf("agent status: %w", err)
		}
		rec, err := provider.NewReconciler(provider.ReconcilerConfig{Source: rt, NAS: nc, CallbackURL: ch.CallbackURL, Home: cfg.Home, By: "status"})
		if err != nil {
			return fmt.Errorf("agent status: %w", err)
		}
		if obs, err := rec.Observe(callCtx); err != nil {
			st.NASError = err.Error()
		} else {
			st.NAS = &obs
			st.Desired = obs.Desired
			in := obs.Plan.InSync()
			st.InSync = &in
		}
		st.JWKS = probeJWKS(callCtx, ch.NASJWKSURL)
		if state.Agent != nil {
			st.JWKS.Agent = state.Agent.JWKS
		}
	}

	if o.fires > 0 {
		runs, err := rt.Ledger().Runs(ctx, ledger.Filter{Limit: o.fires})
		if err != nil {
			return fmt.Errorf("agent status: %w", err)
		}
		st.LastFires = runs
	}
	if st.LastFires == nil {
		st.LastFires = []ledger.Run{}
	}
	if st.Desired == nil {
		st.Desired = []provider.Arm{}
	}

	if o.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return printAgentStatus(out, st)
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
func probeJWKS(ctx context.Context, url string) *jwksStatus {
	s := &jwksStatus{URL: url}
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

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func printAgentStatus(out io.Writer, st agentStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	// Every argument is text from the home, NAS or the key set: escaped.
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", termSafeArgs(args)...) }
	p("provider:\t%s (%s)", st.Provider, st.Why)
	p("home:\t%s", st.Home)
	if st.StoreWritable {
		p("store:\twritable")
	} else {
		p("store:\tNOT writable: %s", st.StoreError)
	}
	switch a := st.Agent; {
	case a == nil:
		p("agent:\tnever started on this home")
	case st.Running:
		p("agent:\trunning, pid %d, listening on %s, since %s", a.PID, a.Listen, fmtTime(a.StartedAt))
	case a.StoppedAt != nil:
		p("agent:\tstopped at %s (last pid %d, provider %s)", fmtTime(*a.StoppedAt), a.PID, a.Provider)
	default:
		p("agent:\tnot running (pid %d is gone; it did not stop cleanly)", a.PID)
	}
	if j := st.JWKS; j != nil {
		now := "unreachable: " + j.Error
		if j.Reachable {
			now = fmt.Sprintf("reachable, %d keys", j.Keys)
		}
		p("jwks:\t%s: %s", j.URL, now)
		if h := j.Agent; h != nil {
			seen := "not loaded"
			if h.Loaded {
				seen = fmt.Sprintf("loaded at %s, %d keys", fmtTime(h.LoadedAt), h.Keys)
			}
			if h.LastError != "" {
				seen += fmt.Sprintf("; %d failed fetches, last at %s: %s", h.Failures, fmtTime(h.LastErrorAt), h.LastError)
			}
			p("\tas the agent saw it: %s", seen)
		}
	}
	switch {
	case st.NASError != "":
		p("nas:\tcannot list armed fires: %s", st.NASError)
	case st.NAS != nil:
		verdict := "in sync"
		if !*st.InSync {
			verdict = "NOT in sync"
		}
		p("nas:\tdesired %d, armed %d: %s", len(st.NAS.Desired), len(st.NAS.Armed), verdict)
	default:
		p("desired:\t%d fires (built-in timer)", len(st.Desired))
	}
	if err := w.Flush(); err != nil {
		return err
	}

	if st.NAS != nil {
		armedAt := map[string]provider.Arm{}
		for _, a := range st.NAS.Armed {
			armedAt[a.JobID] = a
		}
		t := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(t, "\nJOB\tDESIRED\tARMED\tSTATE")
		row := func(job string, desired, armed, state string) {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", termSafeArgs([]any{job, desired, armed, state})...)
		}
		pl := st.NAS.Plan
		for _, a := range pl.Unchanged {
			row(a.JobID, fmtTime(a.FireAt), fmtTime(a.FireAt), "armed")
		}
		for _, a := range pl.Provision {
			if cur, ok := armedAt[a.JobID]; ok {
				row(a.JobID, fmtTime(a.FireAt), fmtTime(cur.FireAt), "changed: to re-arm")
			} else {
				row(a.JobID, fmtTime(a.FireAt), "-", "missing: to arm")
			}
		}
		for _, a := range pl.Cancel {
			row(a.JobID, "-", fmtTime(a.FireAt), "orphan: to cancel")
		}
		for _, a := range pl.Delivering {
			row(a.JobID, "-", fmtTime(a.FireAt), "due: NAS is delivering it")
		}
		for _, a := range pl.Overdue {
			row(a.JobID, fmtTime(a.FireAt), "-", "overdue: misfire policy at the agent's next start")
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}

	if r := st.LastReconcile; r != nil {
		outcome := "ok"
		if !r.OK {
			outcome = "FAILED: " + r.Error
		}
		fmt.Fprintf(out, "\nlast reconcile: %s by %s in %dms: %s (provisioned %d, cancelled %d)\n",
			termSafeArgs([]any{fmtTime(r.At), r.By, r.DurationMS, outcome, len(r.Provisioned), len(r.Cancelled)})...)
		c := st.Counts
		fmt.Fprintf(out, "counts: %d reconciles, %d failed, %d provisioned, %d cancelled, %d missed recorded\n",
			c.Reconciles, c.Failures, c.Provisioned, c.Cancelled, c.MissedRecorded)
	}
	if len(st.Errors) > 0 {
		fmt.Fprintln(out, "\nrecent errors:")
		errs := st.Errors
		if len(errs) > 5 {
			errs = errs[len(errs)-5:]
		}
		for _, e := range errs {
			job := ""
			if e.JobID != "" {
				job = " " + e.JobID
			}
			fmt.Fprintf(out, "  %s %s%s: %s\n", termSafeArgs([]any{fmtTime(e.At), e.Op, job, e.Error})...)
		}
	}

	fmt.Fprintln(out)
	if len(st.LastFires) == 0 {
		fmt.Fprintln(out, "no fires recorded yet")
		return nil
	}
	t := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(t, "WHEN\tJOB\tSLOT\tSTATE\tTRIGGER\tRUN\tREASON")
	for _, r := range st.LastFires {
		reason := r.Reason
		if reason == "" {
			reason = r.Error
		}
		reason = cutText(strings.ReplaceAll(reason, "\n", " "), 60)
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafeArgs([]any{fmtTime(r.LastAt), r.JobID, fmtTime(r.Slot), r.State, r.Trigger, r.RunID, reason})...)
	}
	return t.Flush()
}
