package agenthttp_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// /readyz fails ("jobs") while jobs.json on disk does not parse or is over
// its limit, with the reason and without the home's path; the agent keeps
// claiming fires from its last good jobs meanwhile, and the first claim
// writes them back, which makes it ready again.
func TestReadyzFailsWhileJobsFileIsBad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content, reason string
	}{
		{"garbage", "this is not json", "jobs.json does not parse"},
		{"cut short", `{"version":2,"generation":3,"jobs":[{"id":"job-1",`, "jobs.json does not parse"},
		{"oversize", `{"version":2,"generation":3,"jobs":[]}` + strings.Repeat(" ", 8192),
			"over the limit of 4096 bytes set by max_jobs_file_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			home := t.TempDir()
			runs := &counter{runs: map[string]int{}}
			var clock atomic.Pointer[time.Time]
			at := t0 // the job is added at t0: its first slot is slot
			clock.Store(&at)
			nowFn := func() time.Time { return *clock.Load() }
			rt, err := agent.Open(ctx, agent.Config{
				Home: home, Now: nowFn, Logger: quiet,
				Runners:     map[string]runner.Runner{"count": runs},
				MaxJobsFile: store.Limit{Bytes: 4096, Setting: "max_jobs_file_bytes"},
			})
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			t.Cleanup(func() {
				if !closed {
					_ = rt.Close(ctx)
				}
			})
			if _, _, err := rt.AddJob(ctx, agent.JobSpec{ID: "job-1", Schedule: "every 1h", Payload: runner.Payload{Kind: "count"}}); err != nil {
				t.Fatal(err)
			}
			later := now
			clock.Store(&later)
			h := agenthttp.New(agenthttp.Config{Firer: rt, Logger: quiet, Now: nowFn})
			if code, checks := readyz(t, h); code != http.StatusOK || checks["jobs"] != "ok" {
				t.Fatalf("readyz %d %v, want 200 with jobs ok", code, checks)
			}

			path := filepath.Join(home, store.JobsFile)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			code, checks := readyz(t, h)
			if code != http.StatusServiceUnavailable || !strings.Contains(checks["jobs"], tc.reason) {
				t.Fatalf("readyz %d %v, want 503 with jobs: %q", code, checks, tc.reason)
			}
			if strings.Contains(checks["jobs"], home) {
				t.Fatalf("the public readiness answer names the home: %q", checks["jobs"])
			}
			if !strings.Contains(checks["jobs"], "last good jobs") {
				t.Fatalf("readyz %q does not say the last good jobs are used", checks["jobs"])
			}

			// The agent still claims and runs the job's slot.
			res, err := rt.Fire(ctx, "job-1", slot, agent.TriggerScheduled)
			if err != nil || res.Status != agent.FireAccepted {
				t.Fatalf("fire while jobs.json is bad: %+v, %v", res, err)
			}
			if code, checks := readyz(t, h); code != http.StatusOK || checks["jobs"] != "ok" {
				t.Fatalf("readyz %d %v after the claim wrote the jobs back, want 200", code, checks)
			}
			closed = true
			if err := rt.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if n := runs.count("job-1"); n != 1 {
				t.Fatalf("job-1 ran %d times, want 1", n)
			}
			other, err := store.Open(home, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if j, err := other.Get(ctx, "job-1"); err != nil || j.NextRunAt == nil || !j.NextRunAt.After(slot) {
				t.Fatalf("jobs.json after the claim: %+v, %v", j, err)
			}
			if copies, _ := filepath.Glob(path + ".corrupt-*"); len(copies) != 1 {
				t.Fatalf("copies of the bad file %v, want 1", copies)
			}
		})
	}
}
