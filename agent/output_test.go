package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/output"
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
		case tc.want != "" && (err != nil || !slices.Equal(sortedLines(string(got)), sortedLines(tc.want))):
			// Standard output and standard error come through pipes of
			// their own: each in order, the two in the order they were read.
			t.Fatalf("%s: output %q (%v), want the lines of %q", tc.id, got, err, tc.want)
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

// TestOutputStreamsApart: a run's output file holds both streams, each in
// the order it was written, and the streams file beside it says which bytes came
// from standard error, so a reader splits them back; a run that printed
// only to standard output has an empty list, and one that printed nothing
// no file at all.
func TestOutputStreamsApart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		id, cmd                  string
		combined, stdout, stderr string
	}{
		{"mixed", "echo one; echo two >&2; echo three; echo four >&2; echo five >&2", "one\ntwo\nthree\nfour\nfive\n", "one\nthree\n", "two\nfour\nfive\n"},
		{"plain", "echo only", "only\n", "only\n", ""},
		{"errors", "echo oops >&2; exit 2", "oops\n", "", "oops\n"},
	}
	for _, tc := range tests {
		b.add(t, JobSpec{ID: tc.id, Schedule: "@yearly", Payload: shell(tc.cmd)})
		run := b.runNow(t, tc.id)
		path := filepath.Join(b.home, run.Output)
		got, err := os.ReadFile(path)
		// Between the two streams the order is the order the agent read
		// their pipes in: the same lines, not always in the same order.
		if err != nil || !slices.Equal(sortedLines(string(got)), sortedLines(tc.combined)) {
			t.Fatalf("%s: output %q (%v), want the lines of %q", tc.id, got, err, tc.combined)
		}
		streams, ok, err := output.ReadStreams(path)
		if !ok || err != nil {
			t.Fatalf("%s: no streams file (%v)", tc.id, err)
		}
		stdout, stderr := streams.Split(got, 0)
		if string(stdout) != tc.stdout || string(stderr) != tc.stderr {
			t.Errorf("%s: stdout %q stderr %q, want %q and %q", tc.id, stdout, stderr, tc.stdout, tc.stderr)
		}
	}
	b.add(t, JobSpec{ID: "quiet-streams", Schedule: "@yearly", Payload: shell("true")})
	run := b.runNow(t, "quiet-streams")
	if _, err := os.Stat(output.StreamsFile(filepath.Join(b.home, run.Output))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a run that printed nothing has a streams file (%v)", err)
	}
}

// sortedLines returns the lines of s, sorted.
func sortedLines(s string) []string {
	l := strings.Split(s, "\n")
	slices.Sort(l)
	return l
}
