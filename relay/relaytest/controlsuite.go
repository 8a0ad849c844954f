package relaytest

import (
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

func testInstanceStopped(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	for _, step := range []struct {
		set        relay.InstanceState
		i1, i2, i3 bool
	}{
		{relay.InstanceStopped, true, false, false},
		{relay.InstanceStopped, true, false, false},
		{relay.InstanceRunning, false, false, false},
	} {
		noErr(t, e.SetInstanceState(ctx, "i1", step.set), "set instance state")
		for id, want := range map[string]bool{"i1": step.i1, "i2": step.i2, "i3": step.i3} {
			got, err := e.InstanceStopped(ctx, id)
			noErr(t, err, "instance stopped")
			equal(t, got, want, "stopped "+id)
		}
	}
	// A state the engine does not know is refused and changes nothing.
	noErr(t, e.SetInstanceState(ctx, "i2", relay.InstanceStopped), "stop i2")
	for _, bad := range []relay.InstanceState{"", "paused", "Stopped"} {
		if err := e.SetInstanceState(ctx, "i2", bad); err == nil {
			t.Errorf("SetInstanceState(%q) accepted", bad)
		}
		if err := e.SetInstanceState(ctx, "i3", bad); err == nil {
			t.Errorf("SetInstanceState(%q) accepted", bad)
		}
	}
	for id, want := range map[string]bool{"i2": true, "i3": false} {
		got, err := e.InstanceStopped(ctx, id)
		noErr(t, err, "instance stopped")
		equal(t, got, want, "stopped "+id+" after refused states")
	}
}

func testFirstDelivery(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	const ttl = 200 * time.Millisecond
	for _, step := range []struct {
		id    string
		first bool
	}{{"d1", true}, {"d1", false}, {"d2", true}, {"d1", false}} {
		got, err := e.FirstDelivery(ctx, step.id, ttl)
		noErr(t, err, "first delivery")
		equal(t, got, step.first, "first delivery of "+step.id)
	}
	eventually(t, 5*time.Second, "forgetting d1 after the ttl", func() bool {
		got, err := e.FirstDelivery(ctx, "d1", ttl)
		noErr(t, err, "first delivery")
		return got
	})
	got, err := e.FirstDelivery(ctx, "d1", time.Minute)
	noErr(t, err, "first delivery")
	equal(t, got, false, "first delivery right after it was recorded again")
}

func testCancelAgent(t *testing.T, e relay.Engine) {
	ctx := ctxT(t)
	arm(t, e, "a1", "leased", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	arm(t, e, "a1", "j1", now().Add(time.Hour))
	arm(t, e, "a1", "j2", now().Add(time.Hour))
	arm(t, e, "a2", "j1", now().Add(time.Hour))
	n, err := e.CancelAgent(ctx, "a1")
	noErr(t, err, "cancel agent")
	equal(t, n, 3, "cancelled")
	jobs, _ := listAll(t, e, "a1", 10)
	equal(t, len(jobs), 0, "a1 jobs left")
	jobs, _ = listAll(t, e, "a2", 10)
	equal(t, len(jobs), 1, "a2 jobs left")
	lost(t, e, l)
	n, err = e.CancelAgent(ctx, "a1")
	noErr(t, err, "cancel agent again")
	equal(t, n, 0, "cancelled again")
}
