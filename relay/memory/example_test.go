package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	"github.com/chronoscron/chronos/relay/relaytest"
)

// A one-shot is armed, claimed no earlier than its fire_at under a lease,
// retried once, and acked.
func Example() {
	ctx := context.Background()
	clock := relaytest.NewClock(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	e := memory.New(memory.Options{Now: clock.Now})
	defer e.Close()

	res, _ := e.Arm(ctx, relay.ArmRequest{
		AgentID: "agent-1", JobID: "daily-brief", ScheduleID: "sch-1",
		FireAt: clock.Now().Add(time.Minute),
	})
	fmt.Println("armed", res.OneShot.ScheduleID, "changed:", res.Changed)

	wait, _, _ := e.NextDue(ctx)
	early, _ := e.Claim(ctx, 10, 30*time.Second, relay.Flow{})
	fmt.Println("due in", wait, "claimed early:", len(early))

	clock.Advance(time.Minute)
	leases, _ := e.Claim(ctx, 10, 30*time.Second, relay.Flow{})
	l := leases[0]
	fmt.Println("claimed", l.JobID, "attempt", l.Attempt)

	_ = e.Nack(ctx, l, 5*time.Second, "agent waking up")
	clock.Advance(5 * time.Second)
	leases, _ = e.Claim(ctx, 10, 30*time.Second, relay.Flow{})
	fmt.Println("retried attempt", leases[0].Attempt, "after:", leases[0].LastError)

	_ = e.Ack(ctx, leases[0])
	fmt.Println("stale ack:", e.Ack(ctx, l))
	// Output:
	// armed sch-1 changed: true
	// due in 1m0s claimed early: 0
	// claimed daily-brief attempt 1
	// retried attempt 2 after: agent waking up
	// stale ack: memory: ack sch-1: relay: lease lost
}
