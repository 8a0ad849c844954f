package agent_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/runner"
)

// A job is added, its slot fired twice: the first fire claims it, the
// second is a duplicate. Fire answers at once; the run goes on in the
// background until Close waits for it.
func Example() {
	home, _ := os.MkdirTemp("", "chronos-example")
	defer os.RemoveAll(home)
	now := time.Date(2026, 6, 1, 8, 59, 0, 0, time.UTC)
	ctx := context.Background()
	rt, err := agent.Open(ctx, agent.Config{Home: home, Now: func() time.Time { return now }})
	if err != nil {
		fmt.Println(err)
		return
	}
	job, sched, err := rt.AddJob(ctx, agent.JobSpec{
		ID:       "brief",
		Schedule: "0 9 * * *",
		Payload:  runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "true"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sched.Describe())
	fmt.Println("next:", job.NextRunAt.Format(time.RFC3339))

	now = *job.NextRunAt
	first, _ := rt.Fire(ctx, "brief", *job.NextRunAt, agent.TriggerScheduled)
	again, _ := rt.Fire(ctx, "brief", *job.NextRunAt, agent.TriggerScheduled)
	fmt.Println(first.Status, again.Status)
	desired, _ := rt.Desired(ctx)
	fmt.Println("armed next:", desired[0].FireAt.Format(time.RFC3339))
	_ = rt.Close(ctx)
	// Output:
	// cron "0 9 * * *" in UTC (fixed-time job)
	// next: 2026-06-01T09:00:00Z
	// accepted duplicate
	// armed next: 2026-06-02T09:00:00Z
}
