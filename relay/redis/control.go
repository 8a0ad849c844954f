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

var _ relay.DeliveryLookup = (*Engine)(nil)

// LookupDelivery implements relay.DeliveryLookup: the first-delivery record,
// the row read and the size of the stopped-instance set go out in one
// pipeline (one round trip on a single node); only when some instance is
// stopped does a second call ask about the row's instance.
func (e *Engine) LookupDelivery(ctx context.Context, deliveryID string, ttl time.Duration, agentID, jobID string) (relay.DeliveryInfo, error) {
	if e.opts.Now != nil {
		// A test clock needs the scripted FirstDelivery: take the long way.
		return e.lookupDeliverySlow(ctx, deliveryID, ttl, agentID, jobID)
	}
	if ttl <= 0 {
		ttl = time.Millisecond
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	key := e.k.delivery(deliveryID)
	rows := e.k.rows(e.k.shardOf(agentID), agentID)
	var (
		info     relay.DeliveryInfo
		packed   []byte
		nStopped int64
	)
	err := e.retry(ctx, func(ctx context.Context) error {
		var set *goredis.StatusCmd
		var get *goredis.StringCmd
		var card *goredis.IntCmd
		_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			set = p.SetArgs(ctx, key, nonce, goredis.SetArgs{Mode: "NX", TTL: ttl, Get: true})
			get = p.HGet(ctx, rows, jobID)
			card = p.SCard(ctx, e.k.stopped())
			return nil
		})
		if err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		// As in FirstDelivery: nil means ours was written; our own nonce
		// means a retry after a lost reply to the call that wrote it.
		switch old, err := set.Result(); {
		case errors.Is(err, goredis.Nil):
			info.First = true
		case err != nil:
			return err
		default:
			info.First = old == nonce
		}
		switch v, err := get.Bytes(); {
		case errors.Is(err, goredis.Nil):
			info.Found, packed = false, nil
		case err != nil:
			return err
		default:
			info.Found, packed = true, v
		}
		n, err := card.Result()
		nStopped = n
		return err
	})
	if err != nil {
		return relay.DeliveryInfo{}, fmt.Errorf("redis: lookup delivery: %w", err)
	}
	if !info.First {
		return relay.DeliveryInfo{}, nil
	}
	if !info.Found {
		return info, nil
	}
	f, err := unpackArray(packed)
	if err != nil {
		return relay.DeliveryInfo{}, fmt.Errorf("redis: lookup delivery %s/%s: %w", agentID, jobID, err)
	}
	if info.Row, err = decodeRow(agentID, jobID, f); err != nil {
		return relay.DeliveryInfo{}, fmt.Errorf("redis: lookup delivery: %w", err)
	}
	if nStopped > 0 {
		if info.Stopped, err = e.InstanceStopped(ctx, info.Row.InstanceID); err != nil {
			return relay.DeliveryInfo{}, err
		}
	}
	return info, nil
}

// lookupDeliverySlow is LookupDelivery as its three separate calls.
func (e *Engine) lookupDeliverySlow(ctx context.Context, deliveryID string, ttl time.Duration, agentID, jobID string) (relay.DeliveryInfo, error) {
	var info relay.DeliveryInfo
	first, err := e.FirstDelivery(ctx, deliveryID, ttl)
	if err != nil || !first {
		return info, err
	}
	info.First = true
	row, err := e.Get(ctx, agentID, jobID)
	switch {
	case errors.Is(err, relay.ErrNotFound):
		return info, nil
	case err != nil:
		return relay.DeliveryInfo{}, err
	}
	info.Found, info.Row = true, row
	if info.Stopped, err = e.InstanceStopped(ctx, row.InstanceID); err != nil {
		return relay.DeliveryInfo{}, err
	}
	return info, nil
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
