package relay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// A dispatcher hands each due fire to a Deliverer and acks it once the
// Deliverer says Done.
func ExampleDispatcher() {
	ctx, cancel := context.WithCancel(context.Background())
	engine := memory.New(memory.Options{})
	defer engine.Close()

	delivered := make(chan struct{})
	d := relay.NewDispatcher(engine, relay.DelivererFunc(func(_ context.Context, l relay.Lease) relay.Outcome {
		fmt.Println("fire", l.AgentID, l.JobID, "attempt", l.Attempt)
		close(delivered)
		return relay.Outcome{Kind: relay.Done}
	}), relay.DispatcherConfig{Logger: quiet})
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()

	_, _ = engine.Arm(ctx, relay.ArmRequest{
		AgentID: "agent-1", JobID: "daily-brief", ScheduleID: "sch-1",
		FireAt: time.Now().Add(20 * time.Millisecond),
	})
	<-delivered
	cancel()
	fmt.Println("run:", <-done)
	stats, _ := engine.Stats(context.Background())
	fmt.Println("armed after ack:", stats.Armed)
	// Output:
	// fire agent-1 daily-brief attempt 1
	// run: <nil>
	// armed after ack: 0
}
