package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Wake implements relay.Queue. The channel is closed when an entry may have
// become due earlier than dispatchers wait for: an arm or a nack made an
// entry the earliest of its shard, or a replay or reap made entries due now,
// in this process or any other sharing the store (Redis Pub/Sub on a channel
// of the prefix). The subscription starts on the first call, which returns
// once it is confirmed, and reconnects by itself; each resubscription also
// wakes the dispatchers, since announcements made while it was down are
// lost, and they then ask NextDue again.
func (e *core) Wake() <-chan struct{} {
	e.wakeOnce.Do(func() {
		e.closeMu.Lock()
		defer e.closeMu.Unlock()
		if e.isClosed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ps := e.c.Subscribe(ctx, e.k.wake())
		// Wait for the confirmation so that an announcement right after the
		// first Wake is not missed; on failure go-redis keeps trying in the
		// channel below, which wakes the dispatchers once it is subscribed.
		if _, err := ps.Receive(ctx); err != nil {
			e.log.Warn("redis wake subscription not confirmed", "err", err)
		}
		e.ps = ps
		ch := ps.ChannelWithSubscriptions()
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for msg := range ch {
				if sub, ok := msg.(*goredis.Subscription); ok && sub.Kind != "subscribe" {
					continue
				}
				e.notify()
			}
		}()
	})
	return e.wake.C()
}

// notify wakes every waiting dispatcher of this process.
func (e *core) notify() { e.wake.Notify() }
