package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	"github.com/chronoscron/chronos/relay/relaytest"
)

// TestMain fails the package if a test leaves goroutines behind: the
// dispatcher suite starts dispatchers, deliverers and HTTP servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	relaytest.RunEngineSuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			e := memory.New(memory.Options{})
			t.Cleanup(func() { _ = e.Close() })
			return e
		},
		NewWithClock: func(t *testing.T, c *relaytest.Clock) relay.Engine {
			e := memory.New(memory.Options{Now: c.Now})
			t.Cleanup(func() { _ = e.Close() })
			return e
		},
	})
}

func TestDispatcher(t *testing.T) {
	t.Parallel()
	relaytest.RunDispatcherSuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			e := memory.New(memory.Options{})
			t.Cleanup(func() { _ = e.Close() })
			return e
		},
	})
}

// setup returns an engine on a fake clock.
func setup(t *testing.T) (*memory.Engine, *relaytest.Clock) {
	t.Helper()
	c := relaytest.NewClock(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	e := memory.New(memory.Options{Now: c.Now})
	t.Cleanup(func() { _ = e.Close() })
	return e, c
}

func TestReplayDropsFireOfJobArmedAndDeliveredSince(t *testing.T) {
	t.Parallel()
	e, c := setup(t)
	ctx := context.Background()
	arm := func(id string, at time.Time) {
		t.Helper()
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a1", JobID: "job", FireAt: at, ScheduleID: id}); err != nil {
			t.Fatalf("arm %s: %v", id, err)
		}
	}
	claim := func() relay.Lease {
		t.Helper()
		ls, err := e.Claim(ctx, 1, time.Minute, relay.Flow{})
		if err != nil || len(ls) != 1 {
			t.Fatalf("claim: %v, %d leases", err, len(ls))
		}
		return ls[0]
	}
	arm("s1", c.Now())
	if err := e.Kill(ctx, claim(), "gave up"); err != nil {
		t.Fatalf("kill: %v", err)
	}
	arm("s2", c.Now()) // the job was armed again since, and delivered
	if err := e.Ack(ctx, claim()); err != nil {
		t.Fatalf("ack: %v", err)
	}
	rp, err := e.Replay(ctx, []string{"s1"})
	if err != nil || len(rp.Replayed) != 0 || len(rp.Dropped) != 1 || rp.Dropped[0].ScheduleID != "s1" || rp.Dropped[0].Reason != relay.ReplayDropRearmed {
		t.Fatalf("replay = %+v, %v; want s1 dropped as %s", rp, err, relay.ReplayDropRearmed)
	}
	if _, err := e.Get(ctx, "a1", "job"); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("get after dropped replay: %v, want not found", err)
	}
}

func TestArmValidation(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		req  relay.ArmRequest
	}{
		{"no agent", relay.ArmRequest{JobID: "j", FireAt: at, ScheduleID: "s"}},
		{"no job", relay.ArmRequest{AgentID: "a", FireAt: at, ScheduleID: "s"}},
		{"no schedule id", relay.ArmRequest{AgentID: "a", JobID: "j", FireAt: at}},
		{"no fire_at", relay.ArmRequest{AgentID: "a", JobID: "j", ScheduleID: "s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, _ := setup(t)
			if _, err := e.Arm(context.Background(), tc.req); err == nil {
				t.Fatal("arm accepted an invalid request")
			}
		})
	}
	t.Run("schedule id of another job", func(t *testing.T) {
		t.Parallel()
		e, _ := setup(t)
		ctx := context.Background()
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: "j1", FireAt: at, ScheduleID: "s"}); err != nil {
			t.Fatalf("arm: %v", err)
		}
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: "j2", FireAt: at, ScheduleID: "s"}); err == nil {
			t.Fatal("arm reused a schedule id of another job")
		}
	})
}

func TestClosedAndCancelled(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Claim(ctx, 1, time.Minute, relay.Flow{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim with a cancelled context: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, _, err := e.NextDue(context.Background()); !errors.Is(err, memory.ErrClosed) {
		t.Fatalf("next due after close: %v, want ErrClosed", err)
	}
}

// TestClaimInterleavesAgentsDueTogether arms, agent after agent, three
// fires of each of three agents due in the same millisecond: claims take
// them round the agents, each agent's in the order it armed them, as on
// Redis.
func TestClaimInterleavesAgentsDueTogether(t *testing.T) {
	e := memory.New(memory.Options{})
	defer e.Close()
	ctx := context.Background()
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	for _, agent := range []string{"a1", "a2", "a3"} {
		for _, job := range []string{"j2", "j0", "j1"} {
			if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: agent, JobID: job, FireAt: at, ScheduleID: agent + job}); err != nil {
				t.Fatalf("arm: %v", err)
			}
		}
	}
	var got []string
	for len(got) < 9 {
		ls, err := e.Claim(ctx, 3, time.Minute, relay.Flow{})
		if err != nil || len(ls) != 3 {
			t.Fatalf("claim: %d leases, %v; want 3", len(ls), err)
		}
		for _, l := range ls {
			got = append(got, l.AgentID+"/"+l.JobID)
		}
	}
	want := "a1/j2 a2/j2 a3/j2 a1/j0 a2/j0 a3/j0 a1/j1 a2/j1 a3/j1"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("claim order %s, want %s", g, want)
	}
}
