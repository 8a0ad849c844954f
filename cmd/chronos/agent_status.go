package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/sidecar"
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

func runAgentStatus(ctx context.Context, o agentStatusOptions, out io.Writer) error {
	cfg, decision, err := loadAgentConfig(o.config, os.LookupEnv)
	if err != nil {
		return err
	}
	if o.home != "" {
		cfg.Home = o.home
	}
	if o.fires < 0 {
		return usagef("agent status: --fires must not be negative")
	}
	st, err := sidecar.Status(ctx, sidecar.StatusOptions{Config: cfg, Decision: decision, Fires: o.fires})
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return printAgentStatus(out, st)
}

func printAgentStatus(out io.Writer, st sidecar.Report) error {
	// Every text is from the home, NAS or the key set: escaped.
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, l := range st.Summary() {
		if l.Label != "" {
			l.Label += ":"
		}
		fmt.Fprintf(w, "%s\t%s\n", termSafeArgs([]any{l.Label, l.Text})...)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if rows := st.PlanRows(); st.NAS != nil {
		t := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(t, "\nJOB\tDESIRED\tARMED\tSTATE")
		for _, r := range rows {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", termSafeArgs([]any{r.JobID, r.Desired, r.Armed, r.State})...)
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	printReconcile(out, st)
	if err := chain.WriteOpen(out, st.Chains, st.Breakers); err != nil {
		return err
	}
	return printFires(out, st.LastFires)
}

// printReconcile prints the last reconcile, the counters and the last five
// errors.
func printReconcile(out io.Writer, st sidecar.Report) {
	if r := st.LastReconcile; r != nil {
		outcome := "ok"
		if !r.OK {
			outcome = "FAILED: " + r.Error
		}
		fmt.Fprintf(out, "\nlast reconcile: %s by %s in %dms: %s (provisioned %d, cancelled %d)\n",
			termSafeArgs([]any{sidecar.FormatTime(r.At), r.By, r.DurationMS, outcome, len(r.Provisioned), len(r.Cancelled)})...)
		c := st.Counts
		fmt.Fprintf(out, "counts: %d reconciles, %d failed, %d provisioned, %d cancelled, %d missed recorded\n",
			c.Reconciles, c.Failures, c.Provisioned, c.Cancelled, c.MissedRecorded)
	}
	if len(st.Errors) == 0 {
		return
	}
	fmt.Fprintln(out, "\nrecent errors:")
	for _, e := range st.Errors[max(len(st.Errors)-5, 0):] {
		job := ""
		if e.JobID != "" {
			job = " " + e.JobID
		}
		fmt.Fprintf(out, "  %s %s%s: %s\n", termSafeArgs([]any{sidecar.FormatTime(e.At), e.Op, job, e.Error})...)
	}
}

// printFires prints the last fires from the run ledger.
func printFires(out io.Writer, fires []ledger.Run) error {
	fmt.Fprintln(out)
	if len(fires) == 0 {
		fmt.Fprintln(out, "no fires recorded yet")
		return nil
	}
	t := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(t, "WHEN\tJOB\tSLOT\tSTATE\tTRIGGER\tRUN\tREASON")
	for _, r := range fires {
		reason := r.Reason
		if reason == "" {
			reason = r.Error
		}
		reason = cutText(strings.ReplaceAll(reason, "\n", " "), 60)
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafeArgs([]any{sidecar.FormatTime(r.LastAt), r.JobID, sidecar.FormatTime(r.Slot), r.State, r.Trigger, r.RunID, reason})...)
	}
	return t.Flush()
}
