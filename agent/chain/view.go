package chain

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
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

// WriteList writes chains as a table: id, class, state, steps, depth,
// created, expires or closed, and the close reason.
func WriteList(w io.Writer, chains []Chain) error {
	if len(chains) == 0 {
		_, err := fmt.Fprintln(w, "no chains")
		return err
	}
	rows := make([][]string, 0, len(chains))
	for _, c := range chains {
		until := stamp(&c.ExpiresAt)
		if c.ClosedAt != nil {
			until = stamp(c.ClosedAt)
		}
		reason := c.ClosedReason
		if c.Outcome != "" && !c.Open() {
			reason = string(c.Outcome) + ": " + reason
		}
		rows = append(rows, []string{c.ID, c.Class, string(c.State),
			fmt.Sprintf("%d/%d", c.Children, c.Limits.MaxChildren), fmt.Sprintf("%d/%d", c.DepthReached, c.Limits.MaxDepth),
			stamp(&c.CreatedAt), until, termtext.Dash(reason)})
	}
	return termtext.Table(w, []string{"ID", "CLASS", "STATE", "STEPS", "DEPTH", "CREATED", "EXPIRES/CLOSED", "REASON"}, rows)
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
		stamp(s.StartedAt), stamp(s.EndedAt), esc(termtext.Dash(s.RunID)))
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
	rows := make([][]string, 0, len(breakers))
	for _, br := range breakers {
		rows = append(rows, []string{br.Class, string(br.State), strconv.Itoa(len(br.Failures)), strconv.Itoa(br.Openings),
			stamp(br.OpenedAt), stamp(br.ResumeAt), termtext.Dash(strings.Join(br.LastRunIDs, ",")), termtext.Dash(termtext.Cut(br.Reason, 80))})
	}
	return termtext.Table(w, []string{"CLASS", "STATE", "FAILURES", "OPENINGS", "OPENED", "RESUME", "LAST RUNS", "REASON"}, rows)
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
