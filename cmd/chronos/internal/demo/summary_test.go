package demo

import (
	"bytes"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
)

func TestSummaryCountsTheLedgerPerJob(t *testing.T) {
	t.Parallel()
	runs := []ledger.Run{
		{JobID: "tick", State: ledger.StateSucceeded, LatenessMS: 3},
		{JobID: "tick", State: ledger.StateSucceeded, LatenessMS: 1},
		{JobID: "tick", State: ledger.StateFailed, LatenessMS: 2},
		{JobID: "tick", State: ledger.StateDuplicate},
		{JobID: "paris", State: ledger.StateInterrupted, LatenessMS: 12000},
		{JobID: "paris", State: ledger.StateSkipped},
		{JobID: "paris", State: ledger.StateMissed},
		{JobID: "extra", State: ledger.StateSucceeded, LatenessMS: 0},
	}
	tests := []struct {
		name string
		home home
		head string
	}{
		{"temporary home", home{dir: "/tmp/x", kind: homeTemporary}, "\nSummary after 8s (from the run ledger, removed with the temporary home):\n"},
		{"kept home", home{dir: "/srv/h", kind: homeKept}, "\nSummary after 8s (from the run ledger in /srv/h/runs; chronos runs list --home /srv/h shows every run):\n"},
	}
	table := "" +
		"  JOB       FIRES  SUCCEEDED  FAILED  DUPLICATES  MISSED/SKIPPED  LATENESS p50  LATENESS max\n" +
		"  extra         1          1       0           0               0            0s            0s\n" +
		"  flaky         0          0       0           0               0             -             -\n" +
		"  once          0          0       0           0               0             -             -\n" +
		"  paris         1          0       1           0               2           12s           12s\n" +
		"  tick          3          2       1           1               0           2ms           3ms\n" +
		"  5 fires, 2 failures, 1 duplicates answered without a second run.\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var w bytes.Buffer
			printSummary(&w, tally(runs), tt.home, 8*time.Second)
			if want := tt.head + table; w.String() != want {
				t.Errorf("summary:\n%s\nwant:\n%s", w.String(), want)
			}
		})
	}
}
