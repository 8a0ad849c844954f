package relaytest

import (
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// woken fails the test unless w is closed within a few seconds.
func woken(t *testing.T, w <-chan struct{}, after string) {
	t.Helper()
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatalf("no wake after %s", after)
	}
}

// Each wake test takes the channel right before the step that must close
// it, as a dispatcher does before it asks NextDue.

func testWakeOnArm(t *testing.T, e relay.Engine) {
	w := e.Wake()
	arm(t, e, "a1", "job", now().Add(time.Hour))
	woken(t, w, "an arm")
	// Every holder wakes, not one of them.
	w1, w2 := e.Wake(), e.Wake()
	arm(t, e, "a1", "job2", now().Add(time.Minute))
	woken(t, w1, "an arm (first holder)")
	woken(t, w2, "an arm (second holder)")
}

func testWakeOnNack(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	l := claimOne(t, e, time.Minute)
	w := e.Wake()
	// Due again in a second: earlier than anything a dispatcher waits for.
	noErr(t, e.Nack(ctxT(t), l, time.Second, "agent answered 500"), "nack")
	woken(t, w, "a nack")
}

func testWakeOnReplay(t *testing.T, e relay.Engine) {
	res := arm(t, e, "a1", "job", now().Add(-time.Second))
	noErr(t, e.Kill(ctxT(t), claimOne(t, e, time.Minute), "gave up"), "kill")
	w := e.Wake()
	rp, err := e.Replay(ctxT(t), []string{res.OneShot.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	woken(t, w, "a replay")
}

func testWakeOnReap(t *testing.T, e relay.Engine) {
	arm(t, e, "a1", "job", now().Add(-time.Second))
	claimOne(t, e, 50*time.Millisecond)
	w := e.Wake()
	eventually(t, 5*time.Second, "reap", func() bool {
		n, err := e.Reap(ctxT(t))
		noErr(t, err, "reap")
		return n == 1
	})
	woken(t, w, "a reap")
}
