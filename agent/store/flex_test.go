package store

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
)

// TestFlexRoundTrip: a job's flexible window is kept in jobs.json as a
// duration string under "flex", read back by another store on the home,
// and left out for a job without one, so files and readers that know no
// windows are unaffected.
func TestFlexRoundTrip(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	s := open(t, home)
	err := s.Update(context.Background(), func(st *State) error {
		if err := st.Add(&job.Job{ID: "flex", Schedule: "@daily", Enabled: true, Flex: job.Duration(10 * time.Minute)}); err != nil {
			return err
		}
		return st.Add(&job.Job{ID: "plain", Schedule: "@daily", Enabled: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(home, JobsFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), `"flex":`); n != 1 || !strings.Contains(string(raw), `"flex":"10m0s"`) {
		t.Fatalf("jobs.json has %d flex keys, want one \"10m0s\":\n%s", n, raw)
	}
	jobs, err := open(t, home).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != "flex" || jobs[0].Flex.Std() != 10*time.Minute || jobs[1].Flex != 0 {
		t.Fatalf("read back %+v", jobs)
	}
	if c := jobs[0].Clone(); c.Flex != jobs[0].Flex {
		t.Fatalf("clone lost the window: %s", c.Flex.Std())
	}
	// A line written without the key (an older file) reads as no window;
	// one with a number of nanoseconds, as the other durations accept, too.
	for _, tc := range []struct {
		line string
		want time.Duration
	}{
		{`{"id":"old","schedule":"@daily","enabled":true}`, 0},
		{`{"id":"n","schedule":"@daily","flex":30000000000}`, 30 * time.Second},
		{`{"id":"s","schedule":"@daily","flex":"1h30m"}`, 90 * time.Minute},
	} {
		var j job.Job
		if err := json.Unmarshal([]byte(tc.line), &j); err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if j.Flex.Std() != tc.want {
			t.Errorf("%s: flex %s, want %s", tc.line, j.Flex.Std(), tc.want)
		}
	}
}
