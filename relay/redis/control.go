package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

// SetInstanceStopped implements relay.Control.
func (e *Engine) SetInstanceStopped(ctx context.Context, instanceID string, stopped bool) error {
	flag := "0"
	if stopped {
		flag = "1"
	}
	if _, err := e.run(ctx, scriptSetStopped, []string{e.k.stopped()}, e.nowArg(), instanceID, flag); err != nil {
		return fmt.Errorf("redis: set instance stopped: %w", err)
	}
	return nil
}

// InstanceStopped implements relay.Control.
func (e *Engine) InstanceStopped(ctx context.Context, instanceID string) (bool, error) {
	var stopped bool
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		stopped, err = e.c.SIsMember(ctx, e.k.stopped(), instanceID).Result()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("redis: instance stopped: %w", err)
	}
	return stopped, nil
}

// FirstDelivery implements relay.Control. The record expires by the engine's
// clock after ttl. Each call writes a nonce of its own, so when the reply to
// a call that did record the id is lost, the retry still answers true.
func (e *Engine) FirstDelivery(ctx context.Context, deliveryID string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		ttl = time.Millisecond
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	key := e.k.delivery(deliveryID)
	if e.opts.Now != nil {
		v, err := e.run(ctx, scriptFirstDelivery, []string{key}, e.nowArg(), durMs(ttl), nonce)
		if err != nil {
			return false, fmt.Errorf("redis: first delivery: %w", err)
		}
		n, err := integer(v)
		if err != nil {
			return false, fmt.Errorf("redis: first delivery: %w", err)
		}
		return n == 1, nil
	}
	// On Redis's clock one command does it: SET NX with GET returns the
	// value it found, or nil when it wrote ours.
	var first bool
	err := e.retry(ctx, func(ctx context.Context) error {
		old, err := e.c.SetArgs(ctx, key, nonce, goredis.SetArgs{Mode: "NX", TTL: ttl, Get: true}).Result()
		switch {
		case errors.Is(err, goredis.Nil):
			first = true
			return nil
		case err != nil:
			return err
		}
		first = old == nonce
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("redis: first delivery: %w", err)
	}
	return first, nil
}

// CancelAgent implements relay.Control.
func (e *Engine) CancelAgent(ctx context.Context, agentID string) (int, error) {
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptCancelAgent, []string{e.k.rows(s, agentID), e.k.due(s), e.k.lease(s)},
		e.nowArg(), agentID)
	if err != nil {
		return 0, fmt.Errorf("redis: cancel agent: %w", err)
	}
	n, err := integer(v)
	if err != nil {
		return 0, fmt.Errorf("redis: cancel agent: %w", err)
	}
	return int(n), nil
}

// Stats implements the gauges of relay.Engine, summed over the shards.
func (e *Engine) Stats(ctx context.Context) (relay.Stats, error) {
	var st relay.Stats
	for s := range e.k.shards {
		v, err := e.run(ctx, scriptStats, []string{e.k.due(s), e.k.lease(s), e.k.deadByTime(s)}, e.nowArg())
		if err != nil {
			return relay.Stats{}, fmt.Errorf("redis: stats: %w", err)
		}
		a, err := array(v)
		if err != nil || len(a) != 4 {
			return relay.Stats{}, fmt.Errorf("redis: stats: %w", errReply)
		}
		var n [4]int64
		for i := range n {
			if n[i], err = integer(a[i]); err != nil {
				return relay.Stats{}, fmt.Errorf("redis: stats: %w", err)
			}
		}
		st.Armed += n[0] + n[2]
		st.Due += n[1]
		st.Leased += n[2]
		st.DeadLetter += n[3]
	}
	return st, nil
}
