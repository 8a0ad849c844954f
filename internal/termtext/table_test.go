package termtext_test

import (
	"strings"
	"testing"

	"github.com/chronoscron/chronos/internal/termtext"
)

func TestTable(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	err := termtext.Table(&b, []string{"ID", "REASON"}, [][]string{{"a", "fine"}, {"long-id", "bad\x1b[2J\nline\ttab"}})
	want := "ID       REASON\na        fine\nlong-id  bad\\x1b[2J\\nline\\ttab\n"
	if err != nil || b.String() != want {
		t.Fatalf("Table wrote %q, %v; want %q", b.String(), err, want)
	}
	b.Reset()
	if err := termtext.Table(&b, nil, [][]string{{"id:", "x"}, {"schedule:", "y"}}); err != nil || b.String() != "id:        x\nschedule:  y\n" {
		t.Fatalf("Table without header wrote %q, %v", b.String(), err)
	}
	if termtext.Dash("") != "-" || termtext.Dash("x") != "x" {
		t.Fatal("Dash")
	}
}
