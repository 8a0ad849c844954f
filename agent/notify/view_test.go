package notify_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/notify"
)

func TestRowColumns(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	n := notify.Notification{ID: "id1", Target: notify.Target{Kind: notify.KindFile, Path: "/tmp/e"},
		Body: notify.Body{Event: notify.EventFailed, JobID: "j", RunID: "r"}}
	for _, tc := range []struct {
		row  notify.Row
		want []string
	}{
		{notify.Row{Notification: n, State: notify.StatePending},
			[]string{"id1", "failed", "j", "r", "file:/tmp/e", "pending", "0", "-", "now"}},
		{notify.Row{Notification: n, State: notify.StatePending, Attempts: 2, NextAt: at, LastStatus: 503, LastError: "busy"},
			[]string{"id1", "failed", "j", "r", "file:/tmp/e", "pending", "2", "HTTP 503 busy", "2026-11-24T09:00:00Z"}},
		{notify.Row{Notification: n, State: notify.StateSending, LeaseUntil: at, LastError: "dial: refused"},
			[]string{"id1", "failed", "j", "r", "file:/tmp/e", "sending", "0", "dial: refused", "claimed until 2026-11-24T09:00:00Z"}},
		{notify.Row{Notification: n, State: notify.StateDead, Attempts: 9},
			[]string{"id1", "failed", "j", "r", "file:/tmp/e", "dead", "9", "-", "-"}},
	} {
		if got := tc.row.Columns(strings.ToUpper); !reflect.DeepEqual(got, upper(tc.want)) {
			t.Errorf("Columns = %q, want %q", got, upper(tc.want))
		}
	}
	if len(notify.RowHeader) != 9 {
		t.Fatalf("header %v", notify.RowHeader)
	}
	if s := (notify.Row{Notification: n, State: notify.StateDead}).String(); !strings.Contains(s, "id1") || !strings.Contains(s, "is dead") {
		t.Fatalf("String %q", s)
	}
}

func TestWriteRows(t *testing.T) {
	t.Parallel()
	n := notify.Notification{ID: "id1", Target: notify.Target{Kind: notify.KindFile, Path: "/tmp/e"},
		Body: notify.Body{Event: notify.EventFailed, JobID: "evil\x1b[2Jjob\nx", RunID: "r"}}
	var b strings.Builder
	if err := notify.WriteRows(&b, []notify.Row{{Notification: n, State: notify.StateDead, LastError: "gone"}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != strings.Join(notify.RowHeader, " ") {
		t.Fatalf("table %q: want the header and one row", b.String())
	}
	if strings.ContainsAny(lines[1], "\x1b") || !strings.Contains(lines[1], "id1") || !strings.Contains(lines[1], "gone") ||
		!strings.Contains(lines[1], "dead") {
		t.Fatalf("row %q: want id, state and error, no control character", lines[1])
	}
}

// upper is what Columns returns under strings.ToUpper: the escape applies
// to every column.
func upper(cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = strings.ToUpper(c)
	}
	return out
}
