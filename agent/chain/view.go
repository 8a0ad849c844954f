package chain

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chronoscron/chronos/internal/termtext"
)

// esc makes record text safe to print on a terminal.
func esc(s string) string { return termtext.Escape(s, termtext.EscapeNewlines) }

func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteList writes chains as a table: id, class, state, steps, depth,
// created, expires or closed, and the close reason.
func WriteList(w io.Writer, chains []Chain) error {
	if len(chains) == 0 {
		_, err := fmt.Fprintln(w, "no chains")
		return err
	}
	t := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(t, "ID\tCLASS\tSTATE\tSTEPS\tDEPTH\tCREATED\tEXPIRES/CLOSED\tREASON")
	for _, c := range chains {
		until := stamp(&c.ExpiresAt)
		if c.ClosedAt != nil {
			until = stamp(c.ClosedAt)
		}
		reason := c.ClosedReason
		if c.Outcome != "" && !c.Open() {
			reason = string(c.Outcome) + ": " + reason
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d/%d\t%d/%d\t%s\t%s\t%s\n", esc(c.ID), esc(c.Class), c.State, c.Children,
			c.Limits.MaxChildren, c.DepthReached, c.Limits.MaxDepth, stamp(&c.CreatedAt), until, esc(dash(reason)))
	}
	return t.Flush()
}

// WriteStory writes one chain whole: its summary, its transitions and its
// steps as a tree (each step under the step that spawned it) with their
// runs.
func WriteStory(w io.Writer, c Chain) error {
	var b strings.Builder
	fmt.Fprintf(&b, "chain %s (class %s): %s\n", esc(c.ID), esc(c.Class), c.State)
	fmt.Fprintf(&b, "  created %s, expires %s\n", stamp(&c.CreatedAt), stamp(&c.ExpiresAt))
	l := c.Limits
	fmt.Fprintf(&b, "  steps %d/%d, depth %d/%d, max_retries %d, max_concurrent %d\n", c.Children, l.MaxChildren,
		c.DepthReached, l.MaxDepth, l.MaxRetries, l.MaxConcurrent)
	if c.CoolingUntil != nil {
		fmt.Fprintf(&b, "  cooling down until %s\n", stamp(c.CoolingUntil))
	}
	if c.ClosedAt != nil {
		fmt.Fprintf(&b, "  closed %s: %s (%s)\n", stamp(c.ClosedAt), esc(c.ClosedReason), c.Outcome)
	}
	b.WriteString("transitions:\n")
	for _, tr := range c.Transitions {
		fmt.Fprintf(&b, "  %s  %s -> %s  (%s)\n", tr.At.UTC().Format(time.RFC3339), tr.From, tr.To, esc(tr.Trigger))
	}
	b.WriteString("steps:\n")
	children := map[string][]Step{}
	for _, s := range c.Steps {
		children[s.SpawnedBy] = append(children[s.SpawnedBy], s)
	}
	var walk func(parent, indent string)
	walk = func(parent, indent string) {
		list := children[parent]
		sort.SliceStable(list, func(i, j int) bool { return list[i].CreatedAt.Before(list[j].CreatedAt) })
		for _, s := range list {
			writeStep(&b, s, indent)
			walk(s.JobID, indent+"  ")
		}
	}
	walk("", "  ")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeStep(b *strings.Builder, s Step, indent string) {
	fmt.Fprintf(b, "%s%s  [%s depth %d attempt %d]  %s\n", indent, esc(s.JobID), esc(s.Stage), s.Depth, s.Attempt, s.Status)
	fmt.Fprintf(b, "%s    fire %s, started %s, ended %s, run %s\n", indent, s.FireAt.UTC().Format(time.RFC3339),
		stamp(s.StartedAt), stamp(s.EndedAt), esc(dash(s.RunID)))
	if s.Output != "" {
		fmt.Fprintf(b, "%s    output %s\n", indent, esc(s.Output))
	}
	if s.Reason != "" {
		fmt.Fprintf(b, "%s    %s\n", indent, esc(termtext.Cut(s.Reason, 200)))
	}
}

// WriteBreakers writes the class breakers as a table.
func WriteBreakers(w io.Writer, breakers []Breaker) error {
	if len(breakers) == 0 {
		_, err := fmt.Fprintln(w, "no chain breakers")
		return err
	}
	t := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(t, "CLASS\tSTATE\tFAILURES\tOPENINGS\tOPENED\tRESUME\tLAST RUNS\tREASON")
	for _, br := range breakers {
		fmt.Fprintf(t, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", esc(br.Class), br.State, len(br.Failures), br.Openings,
			stamp(br.OpenedAt), stamp(br.ResumeAt), esc(dash(strings.Join(br.LastRunIDs, ","))), esc(dash(termtext.Cut(br.Reason, 80))))
	}
	return t.Flush()
}

// WriteOpen writes the open chains and open breakers, for a status page;
// nothing when there are none.
func WriteOpen(w io.Writer, chains []Chain, breakers []Breaker) error {
	if len(chains) > 0 {
		fmt.Fprintln(w, "\nopen chains:")
		if err := WriteList(w, chains); err != nil {
			return err
		}
	}
	if len(breakers) > 0 {
		fmt.Fprintln(w, "\nopen chain breakers:")
		return WriteBreakers(w, breakers)
	}
	return nil
}
