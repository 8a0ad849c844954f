package termtext

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Table writes rows as aligned columns under header (none when header is
// nil), two spaces apart, every cell passed through Escape on one line: the
// one table layout of the command line's human output.
func Table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header != nil {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = Escape(c, EscapeNewlines)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// Dash returns s, or "-" for an empty s: an empty table cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
