package ledger

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/chronoscron/chronos/internal/termtext"
)

// runTableHeader names the columns of WriteRunTable.
var runTableHeader = []string{"RUN", "JOB", "SLOT", "TRIGGER", "STATE", "ATTEMPT", "FORCED", "LATE", "RESULT", "DURATION", "OUTPUT", "REASON"}

// WriteRunTable writes runs as a table, one line per run: its slot and
// trigger, state and attempt, whether it was forced, how late it started,
// its result and duration, the file of its output (under home) and its
// reason folded onto one line of at most 120 bytes.
func WriteRunTable(w io.Writer, runs []Run, home string) error {
	rows := make([][]string, 0, len(runs))
	for i := range runs {
		r := &runs[i]
		forced, output := "-", ""
		if r.Forced {
			forced = "yes"
		}
		if r.Output != "" {
			output = filepath.Join(home, r.Output)
		}
		rows = append(rows, []string{r.RunID, r.JobID, r.Slot.Format(time.RFC3339), termtext.Dash(r.Trigger), string(r.State),
			fmt.Sprint(r.Attempt), forced, (time.Duration(r.LatenessMS) * time.Millisecond).String(), r.Result(), r.Took(),
			termtext.Dash(output), termtext.Dash(termtext.Cut(strings.ReplaceAll(r.Reason, "\n", " "), 120))})
	}
	return termtext.Table(w, runTableHeader, rows)
}

// WriteOutcome writes how the run ended (Summary) and, when it kept its
// output, the file holding it (under home): each on one line, made safe to
// print on a terminal.
func WriteOutcome(w io.Writer, r *Run, home string) error {
	text := termtext.Escape(r.Summary(), termtext.EscapeNewlines) + "\n"
	if r.Output != "" {
		text += "output: " + termtext.Escape(filepath.Join(home, r.Output), termtext.EscapeNewlines) + "\n"
	}
	if _, err := io.WriteString(w, text); err != nil {
		return fmt.Errorf("write run outcome: %w", err)
	}
	return nil
}
