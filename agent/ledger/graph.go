package ledger

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/chronoscron/chronos/internal/termtext"
)

// OrderChildren orders the runs of one fanout parent: children by run id
// (item order), the reducer last.
func OrderChildren(runs []Run) []Run {
	out := append([]Run(nil), runs...)
	sort.SliceStable(out, func(a, b int) bool {
		ra, rb := out[a].Role == RoleReducer, out[b].Role == RoleReducer
		if ra != rb {
			return rb
		}
		return out[a].RunID < out[b].RunID
	})
	return out
}

// Tree groups runs into top-level runs and the children and reducer of
// each fanout parent, by parent run id. A child whose parent is not among
// runs is shown at the top level.
func Tree(runs []Run) (top []Run, children map[string][]Run) {
	ids := make(map[string]bool, len(runs))
	for _, r := range runs {
		if r.ParentRunID == "" {
			ids[r.RunID] = true
		}
	}
	children = map[string][]Run{}
	for _, r := range runs {
		if r.ParentRunID != "" && ids[r.ParentRunID] {
			children[r.ParentRunID] = append(children[r.ParentRunID], r)
			continue
		}
		top = append(top, r)
	}
	for k, v := range children {
		children[k] = OrderChildren(v)
	}
	return top, children
}

// WriteTree writes runs as a tree: one line per top-level run, its
// children and reducer indented under it, each child with its item.
func WriteTree(w io.Writer, runs []Run) error {
	top, children := Tree(runs)
	for _, r := range top {
		if _, err := fmt.Fprintln(w, treeLine(r)); err != nil {
			return err
		}
		kids := children[r.RunID]
		for i, c := range kids {
			branch := "├─ "
			if i == len(kids)-1 {
				branch = "└─ "
			}
			if _, err := fmt.Fprintln(w, "  "+branch+treeLine(c)); err != nil {
				return err
			}
		}
	}
	return nil
}

func treeLine(r Run) string {
	parts := []string{r.RunID, r.JobID, string(r.State)}
	switch r.Role {
	case RoleChild:
		parts = append(parts, fmt.Sprintf("item=%q", r.Item))
	case RoleReducer:
		parts = append(parts, "reducer")
	case RoleParent:
		parts = append(parts, "fanout")
	}
	if r.Attempt > 1 {
		parts = append(parts, fmt.Sprintf("attempt=%d", r.Attempt))
	}
	parts = append(parts, r.Took())
	line := strings.Join(parts, "  ")
	if r.Reason != "" && r.State != StateSucceeded {
		line += "  " + r.Reason
	}
	return termtext.Escape(line, termtext.EscapeNewlines)
}

// Find returns the run with id among the runs since since; found is false
// when there is none.
func (l *Ledger) Find(ctx context.Context, id string, since time.Time) (Run, bool, error) {
	runs, err := l.Runs(ctx, Filter{Since: since})
	if err != nil {
		return Run{}, false, err
	}
	for _, r := range runs {
		if r.RunID == id {
			return r, true, nil
		}
	}
	return Run{}, false, nil
}

// WriteShow writes run r and, for a fanout parent, its children (each
// with its item and state) and its reducer, with a count per state. The
// output file is written as a path under home, as WriteRunTable does.
func WriteShow(w io.Writer, r Run, children []Run, home string) error {
	output := ""
	if r.Output != "" {
		output = filepath.Join(home, r.Output)
	}
	rows := [][2]string{{"run", r.RunID}, {"job", r.JobID}, {"state", string(r.State)}, {"slot", r.Slot.Format(time.RFC3339)},
		{"trigger", r.Trigger}, {"attempt", fmt.Sprint(r.Attempt)}, {"role", r.Role}, {"parent", r.ParentRunID}, {"item", r.Item},
		{"result", r.Result()}, {"duration", r.Took()}, {"output", output}, {"reason", r.Reason}}
	for _, row := range rows {
		if row[1] == "" {
			continue
		}
		if _, err := fmt.Fprintf(w, "%-9s %s\n", row[0]+":", termtext.Escape(row[1], termtext.EscapeNewlines)); err != nil {
			return err
		}
	}
	if len(children) == 0 {
		return nil
	}
	count := map[State]int{}
	for _, c := range children {
		if c.Role == RoleChild {
			count[c.State]++
		}
	}
	states := make([]string, 0, len(count))
	for s, n := range count {
		states = append(states, fmt.Sprintf("%d %s", n, s))
	}
	sort.Strings(states)
	if _, err := fmt.Fprintf(w, "children: %s\n", strings.Join(states, ", ")); err != nil {
		return err
	}
	for _, c := range children {
		if _, err := fmt.Fprintln(w, "  "+treeLine(c)); err != nil {
			return err
		}
	}
	return nil
}
