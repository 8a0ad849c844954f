package relay_test

import (
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

func TestBroadcastWakesEveryWaiter(t *testing.T) {
	t.Parallel()
	var b relay.Broadcast
	b.Notify() // nobody waits: nothing to do, nothing kept
	const waiters = 5
	var ready, woke sync.WaitGroup
	for range waiters {
		ready.Add(1)
		woke.Add(1)
		go func() {
			defer woke.Done()
			c := b.C()
			ready.Done()
			<-c
		}()
	}
	ready.Wait()
	b.Notify()
	done := make(chan struct{})
	go func() { woke.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("not every waiter woke")
	}
	select {
	case <-b.C():
		t.Fatal("a channel taken after the Notify is already closed")
	default:
	}
}
