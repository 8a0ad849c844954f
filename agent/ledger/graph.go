package ledger

import (
	"fmt"
	"io"
	"sort"
	"strings"
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
	return line
}
