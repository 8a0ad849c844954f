package relaytest

import (
	"context"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// watched is an engine that tells when a dispatcher has asked for the next
// due time: it then holds its wake-up channel and is about to wait, so what
// happens next reaches it only through Wake.
type watched struct {
	relay.Engine
	waiting chan struct{}
}

func (w *watched) NextDue(ctx context.Context) (time.Duration, bool, error) {
	d, ok, err := w.Engine.NextDue(ctx)
	select {
	case w.waiting <- struct{}{}:
	default:
	}
	return d, ok, err
}

// waitingDispatcher starts one dispatcher on e that rechecks only hourly,
// and returns once it waits with nothing due.
func waitingDispatcher(t *testing.T, e relay.Engine, answer AnswerFunc) *dispatch {
	t.Helper()
	w := &watched{Engine: e, waiting: make(chan struct{}, 1)}
	b := startDispatchers(t, e, dispatchOptions{queue: w, answer: answer, cfg: relay.DispatcherConfig{Recheck: time.Hour}})
	select {
	case <-w.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the dispatcher never waited")
	}
	return b
}

// testPeerNackWakesDispatcher: another process nacks a fire to be due soon;
// this process's dispatcher, waiting with nothing due, must deliver it at
// that time, not at its next recheck.
func testPeerNackWakesDispatcher(t *testing.T, e, peer relay.Engine) {
	ctx := ctxT(t)
	armAt(t, peer, "a1", "job", time.Now().Add(-time.Second))
	l := claimOne(t, peer, time.Minute)
	b := waitingDispatcher(t, e, always(Delivered))
	const delay = 500 * time.Millisecond
	nacked := time.Now()
	noErr(t, peer.Nack(ctx, l, delay, "agent answered 500"), "nack")
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	if late := c.At.Sub(nacked); late < delay || late > delay+delay/5 {
		t.Fatalf("the retry came %s after the nack, want %s ± 20%%", late, delay)
	}
	equal(t, c.Req.Attempt, 2, "attempt of the retry")
	drained(t, e)
}

// testPeerReplayWakesDispatcher: another process replays a dead letter; this
// process's waiting dispatcher delivers it at once.
func testPeerReplayWakesDispatcher(t *testing.T, e, peer relay.Engine) {
	ctx := ctxT(t)
	s := armAt(t, peer, "a1", "job", time.Now().Add(-time.Second))
	noErr(t, peer.Kill(ctx, claimOne(t, peer, time.Minute), "gave up"), "kill")
	b := waitingDispatcher(t, e, always(Delivered))
	replayed := time.Now()
	rp, err := peer.Replay(ctx, []string{s.ScheduleID})
	noErr(t, err, "replay")
	equal(t, len(rp.Replayed), 1, "replayed")
	c := b.route.Wait(t, 1, 5*time.Second)[0]
	if late := c.At.Sub(replayed); late > 200*time.Millisecond {
		t.Fatalf("the replayed fire came %s after the replay, want at once", late)
	}
	drained(t, e)
}
