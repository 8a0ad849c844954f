package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/ledger"
)

// TestOutputFileOnlyWhenWritten: a run's output file is made at its first
// byte: a run that prints nothing leaves none (its ledger line still names
// where it would be), one that prints has it whole, and one whose file
// cannot be made fails with the reason.
func TestOutputFileOnlyWhenWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		id, cmd string
		want    string // the file's content; "" none
	}{
		{"quiet", "true", ""},
		{"loud", "echo one; echo two >&2", "one\ntwo\n"},
	}
	for _, tc := range tests {
		b.add(t, JobSpec{ID: tc.id, Schedule: "@yearly", Payload: shell(tc.cmd)})
		run := b.runNow(t, tc.id)
		if run.State != ledger.StateSucceeded || run.Output == "" {
			t.Fatalf("%s: run %+v", tc.id, run)
		}
		got, err := os.ReadFile(filepath.Join(b.home, run.Output))
		switch {
		case tc.want == "" && !errors.Is(err, fs.ErrNotExist):
			t.Fatalf("%s: output file %q (%v), want none", tc.id, got, err)
		case tc.want != "" && (err != nil || string(got) != tc.want):
			t.Fatalf("%s: output %q (%v), want %q", tc.id, got, err, tc.want)
		}
	}
	// output/blocked is a file, so no directory can be made under it.
	if err := os.WriteFile(filepath.Join(b.home, "output", "blocked"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b.add(t, JobSpec{ID: "blocked", Schedule: "@yearly", Payload: shell("echo lost")})
	run := b.runNow(t, "blocked")
	if run.State != ledger.StateFailed || !strings.Contains(run.Reason+run.Error, "output:") {
		t.Fatalf("run %+v, want failed with the output error", run)
	}
}
