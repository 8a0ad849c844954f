package notify

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/internal/termtext"
)

// RowHeader names the columns of Row.Columns.
var RowHeader = []string{"ID", "EVENT", "JOB", "RUN", "TARGET", "STATE", "ATTEMPTS", "LAST", "NEXT"}

// Columns is the row as a person reads it in a table (see RowHeader), each
// column passed through esc (which makes text safe for a terminal): the
// last failed attempt's HTTP status and error, and when the next attempt
// is due ("now", the end of a sender's claim, or "-" once final).
func (r Row) Columns(esc func(string) string) []string {
	last := r.LastError
	if r.LastStatus != 0 {
		last = fmt.Sprintf("HTTP %d %s", r.LastStatus, r.LastError)
	}
	next := "-"
	switch {
	case r.State == StatePending && r.NextAt.IsZero():
		next = "now"
	case r.State == StatePending:
		next = r.NextAt.UTC().Format(time.RFC3339)
	case r.State == StateSending:
		next = "claimed until " + r.LeaseUntil.UTC().Format(time.RFC3339)
	}
	cols := []string{r.ID, string(r.Body.Event), r.Body.JobID, r.Body.RunID, r.Target.Spec(), string(r.State),
		strconv.Itoa(r.Attempts), last, next}
	for i, c := range cols {
		if cols[i] = esc(c); c == "" {
			cols[i] = "-"
		}
	}
	return cols
}

// String says in one line which notification r is and where it stands.
func (r Row) String() string {
	return fmt.Sprintf("notification %s (%s of job %s, run %s, to %s) is %s", r.ID, r.Body.Event, r.Body.JobID, r.Body.RunID, r.Target.Spec(), r.State)
}

// WriteRows writes rows as a table for a person (RowHeader and
// Row.Columns), every column made safe to print on a terminal, on one line.
func WriteRows(w io.Writer, rows []Row) error {
	cells := make([][]string, 0, len(rows))
	for _, r := range rows {
		cells = append(cells, r.Columns(func(s string) string { return termtext.Escape(s, termtext.EscapeNewlines) }))
	}
	return termtext.Table(w, RowHeader, cells)
}
