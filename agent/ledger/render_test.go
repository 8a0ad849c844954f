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
