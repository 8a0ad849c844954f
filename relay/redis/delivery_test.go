package redis_test

import (
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// TestLookupDeliveryMatchesTheThreeCalls checks the relay route's one-call
// lookup against FirstDelivery, Get and InstanceStopped, on Redis's clock
// (the pipelined path) and on an injected clock (the scripted one).
func TestLookupDeliveryMatchesTheThreeCalls(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]redis.Options{
		"redis clock": {},
		"test clock":  {Now: time.Now},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, opts)
			ctx := ctxFor(t, 30*time.Second)
			at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i-a", JobID: "j", FireAt: at,
				CallbackURL: "http://agent.test", ScheduleID: "s1"}); err != nil {
				t.Fatal(err)
			}
			want, err := e.Get(ctx, "a", "j")
			if err != nil {
				t.Fatal(err)
			}

			info, err := e.LookupDelivery(ctx, "d1", time.Minute, "a", "j")
			if err != nil || !info.First || !info.Found || info.Stopped || info.Row != want {
				t.Fatalf("first lookup: %+v, %v; want the row %+v", info, err, want)
			}
			// The id is now recorded, for FirstDelivery too.
			if info, err := e.LookupDelivery(ctx, "d1", time.Minute, "a", "j"); err != nil || info.First {
				t.Fatalf("replayed lookup: %+v, %v; want not first", info, err)
			}
			if first, err := e.FirstDelivery(ctx, "d1", time.Minute); err != nil || first {
				t.Fatalf("FirstDelivery after a lookup: %v, %v", first, err)
			}
			if first, err := e.FirstDelivery(ctx, "d2", time.Minute); err != nil || !first {
				t.Fatalf("FirstDelivery: %v, %v", first, err)
			}
			if info, err := e.LookupDelivery(ctx, "d2", time.Minute, "a", "j"); err != nil || info.First {
				t.Fatalf("lookup after FirstDelivery: %+v, %v; want not first", info, err)
			}

			// Not armed.
			if info, err := e.LookupDelivery(ctx, "d3", time.Minute, "a", "nope"); err != nil || !info.First || info.Found {
				t.Fatalf("lookup of an unarmed job: %+v, %v", info, err)
			}

			// Another instance stopped: still not stopped; its own: stopped.
			if err := e.SetInstanceState(ctx, "i-other", relay.InstanceStopped); err != nil {
				t.Fatal(err)
			}
			if info, err := e.LookupDelivery(ctx, "d4", time.Minute, "a", "j"); err != nil || !info.Found || info.Stopped {
				t.Fatalf("lookup with another instance stopped: %+v, %v", info, err)
			}
			if err := e.SetInstanceState(ctx, "i-a", relay.InstanceStopped); err != nil {
				t.Fatal(err)
			}
			if info, err := e.LookupDelivery(ctx, "d5", time.Minute, "a", "j"); err != nil || !info.Found || !info.Stopped {
				t.Fatalf("lookup with the instance stopped: %+v, %v", info, err)
			}
		})
	}
}
