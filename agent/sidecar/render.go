package sidecar

import (
	"fmt"
	"github.com/chronoscron/chronos/agent/chain"
	"io"
	"strings"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/internal/termtext"
)

// WriteText writes the report as chronos agent status prints it: the
// summary, desired against armed (when NAS was asked), the last reconcile
// with the counters and the last five errors, the open chains and breakers,
// and the last fires. Every text
// from the home, NAS or the key set is escaped for the terminal.
func (r Report) WriteText(w io.Writer) error {
	var summary [][]string
	for _, l := range r.Summary() {
		if l.Label != "" {
			l.Label += ":"
		}
		summary = append(summary, []string{l.Label, l.Text})
	}
	if err := termtext.Table(w, nil, summary); err != nil {
		return err
	}
	if r.NAS != nil {
		var plan [][]string
		for _, p := range r.PlanRows() {
			plan = append(plan, []string{p.JobID, p.Delivery, p.Desired, p.Armed, p.State})
		}
		fmt.Fprintln(w)
		if err := termtext.Table(w, []string{"JOB", "DELIVERY", "DESIRED", "ARMED", "STATE"}, plan); err != nil {
			return err
		}
	}
	r.writeReconcile(w)
	if err := chain.WriteOpen(w, r.Chains, r.Breakers); err != nil {
		return err
	}
	return writeFires(w, r.LastFires)
}

// writeReconcile writes the last reconcile, the counters and the last five
// errors.
func (r Report) writeReconcile(w io.Writer) {
	esc := func(args ...any) []any { return termtext.Args(args) }
	if l := r.LastReconcile; l != nil {
		outcome := "ok"
		if !l.OK {
			outcome = "FAILED: " + l.Error
		}
		fmt.Fprintf(w, "\nlast reconcile: %s by %s in %dms: %s (provisioned %d, cancelled %d)\n",
			esc(FormatTime(l.At), l.By, l.DurationMS, outcome, len(l.Provisioned), len(l.Cancelled))...)
		c := r.Counts
		fmt.Fprintf(w, "counts: %d reconciles, %d failed, %d provisioned, %d cancelled, %d missed recorded\n",
			c.Reconciles, c.Failures, c.Provisioned, c.Cancelled, c.MissedRecorded)
	}
	if len(r.Errors) == 0 {
		return
	}
	fmt.Fprintln(w, "\nrecent errors:")
	for _, e := range r.Errors[max(len(r.Errors)-5, 0):] {
		job := ""
		if e.JobID != "" {
			job = " " + e.JobID
		}
		fmt.Fprintf(w, "  %s %s%s: %s\n", esc(FormatTime(e.At), e.Op, job, e.Error)...)
	}
}

// writeFires writes the last fires from the run ledger.
func writeFires(w io.Writer, fires []ledger.Run) error {
	fmt.Fprintln(w)
	if len(fires) == 0 {
		_, err := fmt.Fprintln(w, "no fires recorded yet")
		return err
	}
	rows := make([][]string, 0, len(fires))
	for _, f := range fires {
		reason := f.Reason
		if reason == "" {
			reason = f.Error
		}
		rows = append(rows, []string{FormatTime(f.LastAt), f.JobID, FormatTime(f.Slot), string(f.State), f.Trigger, f.RunID,
			termtext.Cut(strings.ReplaceAll(reason, "\n", " "), 60)})
	}
	return termtext.Table(w, []string{"WHEN", "JOB", "SLOT", "STATE", "TRIGGER", "RUN", "REASON"}, rows)
}
