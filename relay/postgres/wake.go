package postgres

import (
	"context"
	"time"
)

// wakeChannel is the LISTEN/NOTIFY channel of a schema's wake-ups.
func wakeChannel(schema string) string { return schema + "_wake" }

// Wake implements relay.Queue: the channel closes at the next wake-up
// announced on the schema's channel by any process, or when the listener
// reconnects (an announcement may have been lost meanwhile).
func (c *core) Wake() <-chan struct{} { return c.wake.C() }

// listen holds one connection LISTENing on the schema's wake channel until
// ctx ends, reconnecting with backoff; every notification wakes this
// process's dispatchers.
func (c *core) listen(ctx context.Context) {
	defer close(c.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		c.log.Debug("postgres: wake listener lost its connection", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenOnce listens on one connection until it fails or ctx ends.
func (c *core) listenOnce(ctx context.Context) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection leaves the pool: it stays subscribed until it dies.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, `LISTEN `+wakeChannel(c.schema)); err != nil {
		return err
	}
	// Listening again: wake-ups announced while not listening were lost.
	c.wake.Notify()
	for {
		if _, err := pc.WaitForNotification(ctx); err != nil {
			return err
		}
		c.wake.Notify()
	}
}

// notifySQL is the statement fragment that announces a wake-up to every
// process of the schema.
func (c *core) notifySQL() string { return `pg_notify('` + wakeChannel(c.schema) + `', '')` }
