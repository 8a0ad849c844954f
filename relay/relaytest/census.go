package relaytest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// RunCensusSuite checks an engine's relay.Census: agents and their counts
// follow arms, cancels and acks; stopped instances follow stops and starts;
// max bounds both answers.
func RunCensusSuite(t *testing.T, f Factory) {
	t.Run("ArmedByAgent", func(t *testing.T) {
		t.Parallel()
		testArmedByAgent(t, f.New(t))
	})
	t.Run("StoppedInstances", func(t *testing.T) {
		t.Parallel()
		testStoppedInstances(t, f.New(t))
	})
}

func census(t *testing.T, e relay.Engine) relay.Census {
	t.Helper()
	c, ok := e.(relay.Census)
	if !ok {
		t.Fatalf("%T does not implement relay.Census", e)
	}
	return c
}

func testArmedByAgent(t *testing.T, e relay.Engine) {
	ctx := context.Background()
	c := census(t, e)
	if got, more, err := c.ArmedByAgent(ctx, 0); err != nil || len(got) != 0 || more {
		t.Fatalf("empty store: %v more=%v err=%v", got, more, err)
	}
	at := time.Now().Add(time.Hour)
	arm := func(agent, job string) {
		t.Helper()
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: agent, InstanceID: "i-" + agent, JobID: job, FireAt: at,
			CallbackURL: "http://agent.test/fire", ScheduleID: agent + "/" + job + "/" + at.String()}); err != nil {
			t.Fatalf("arm %s/%s: %v", agent, job, err)
		}
	}
	arm("b[1]*", "j1")
	arm("b[1]*", "j2")
	arm("a", "j1")
	arm("c", "j1")
	want := []relay.AgentArmed{{AgentID: "a", Armed: 1}, {AgentID: "b[1]*", Armed: 2}, {AgentID: "c", Armed: 1}}
	if got, more, err := c.ArmedByAgent(ctx, 0); err != nil || !slices.Equal(got, want) || more {
		t.Fatalf("ArmedByAgent = %v more=%v err=%v, want %v", got, more, err, want)
	}
	if got, more, err := c.ArmedByAgent(ctx, 2); err != nil || !slices.Equal(got, want[:2]) || !more {
		t.Fatalf("ArmedByAgent(max 2) = %v more=%v err=%v, want %v and more", got, more, err, want[:2])
	}
	if _, err := e.Cancel(ctx, "c", "j1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Cancel(ctx, "b[1]*", "j2"); err != nil {
		t.Fatal(err)
	}
	want = []relay.AgentArmed{{AgentID: "a", Armed: 1}, {AgentID: "b[1]*", Armed: 1}}
	if got, _, err := c.ArmedByAgent(ctx, 0); err != nil || !slices.Equal(got, want) {
		t.Fatalf("after cancels: %v err=%v, want %v", got, err, want)
	}
}

func testStoppedInstances(t *testing.T, e relay.Engine) {
	ctx := context.Background()
	c := census(t, e)
	for _, id := range []string{"inst-b", "inst-a", "inst-c"} {
		if err := e.SetInstanceState(ctx, id, relay.InstanceStopped); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetInstanceState(ctx, "inst-c", relay.InstanceRunning); err != nil {
		t.Fatal(err)
	}
	want := []string{"inst-a", "inst-b"}
	if got, more, err := c.StoppedInstances(ctx, 0); err != nil || !slices.Equal(got, want) || more {
		t.Fatalf("StoppedInstances = %v more=%v err=%v, want %v", got, more, err, want)
	}
	if got, more, err := c.StoppedInstances(ctx, 1); err != nil || !slices.Equal(got, want[:1]) || !more {
		t.Fatalf("StoppedInstances(max 1) = %v more=%v err=%v", got, more, err)
	}
}
