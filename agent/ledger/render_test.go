package ledger

import (
	"strings"
	"testing"
	"time"
)

// TestWriteRunTable: a run's line names its output file under the home and
// folds its reason onto one escaped line.
func TestWriteRunTable(t *testing.T) {
	t.Parallel()
	slot := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	var b strings.Builder
	err := WriteRunTable(&b, []Run{{RunID: "r1", JobID: "j", Slot: slot, State: StateFailed, Attempt: 2, Forced: true,
		LatenessMS: 1500, Output: "output/r1.log", Reason: "exit 3:\nboom\x1b[2J"}}, "/home/agent")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if err != nil || len(lines) != 2 || !strings.HasPrefix(lines[0], "RUN") {
		t.Fatalf("table %q %v", b.String(), err)
	}
	for _, want := range []string{"r1", "2026-01-02T03:04:00Z", "failed", "yes", "1.5s", "/home/agent/output/r1.log", `exit 3: boom\x1b[2J`} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("line %q lacks %q", lines[1], want)
		}
	}
}

// TestWriteOutcome: the summary line, then the output file under the home
// when the run kept one; control characters are escaped.
func TestWriteOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  Run
		want string
	}{
		{"output kept", Run{RunID: "r1", JobID: "j", State: StateInterrupted, Output: "output/r1.log", Reason: "stopped\x1b[2J"},
			"run r1 of job j interrupted: stopped\\x1b[2J\noutput: /home/agent/output/r1.log\n"},
		{"no output", Run{RunID: "r2", JobID: "j", State: StateSkipped, Reason: "window\nalready done"},
			"run r2 of job j skipped: window\\nalready done\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteOutcome(&b, &tc.run, "/home/agent"); err != nil || b.String() != tc.want {
				t.Fatalf("WriteOutcome = %q, %v; want %q", b.String(), err, tc.want)
			}
		})
	}
}
