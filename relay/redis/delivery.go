package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

// nonceBytes is the randomness of a first-delivery nonce. A nonce tells one
// call from the others made for the same delivery id while its record lives
// (a relay's retries of one lease, or a replay): 72 bits is plenty, and its
// 12 base64 characters keep the record's value in Redis's smallest string
// allocation. Records written with the 24 hex digits of earlier releases
// read the same way (a nonce is only ever compared with the caller's own),
// so processes of both releases may share a store.
const nonceBytes = 9

// newNonce returns a fresh nonce for one first-delivery call.
func newNonce() string {
	var b [nonceBytes]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// scriptFirstDelivery records a delivery id unless it is already recorded
// and not yet expired by the engine's clock. The record holds the caller's
// nonce, so a retry of a call whose reply was lost is still told "first".
//
// KEYS[1] the delivery's record
// ARGV[1] now, ARGV[2] ttl ms, ARGV[3] nonce of this call
//
// Returns 1 the first time, else 0.
var scriptFirstDelivery = script(`
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
if v then
  local sp = string.find(v, ' ', 1, true)
  if string.sub(v, sp + 1) == ARGV[3] then return 1 end
  if tonumber(string.sub(v, 1, sp - 1)) >= now then return 0 end
end
redis.call('SET', KEYS[1], (now + ttl) .. ' ' .. ARGV[3], 'PX', ttl)
return 1
`)

// FirstDelivery implements relay.Control. The record expires by the engine's
// clock after ttl. Each call writes a nonce of its own, so when the reply to
// a call that did record the id is lost, the retry still answers true.
func (e *queue) FirstDelivery(ctx context.Context, deliveryID string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		ttl = time.Millisecond
	}
	nonce := newNonce()
	key := e.k.deliveryOf(e.k.shardOf(deliveryID), deliveryID)
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
// the row read and the size of the shard's copy of the stopped-instance set
// go out in one pipeline (one round trip, to the agent's shard's master
// alone); only when some instance is stopped does a second call ask about
// the row's instance. Its record is kept in the agent's shard, apart from
// FirstDelivery's: the relay route of a fire depends on no other master.
func (e *queue) LookupDelivery(ctx context.Context, deliveryID string, ttl time.Duration, agentID, jobID string) (relay.DeliveryInfo, error) {
	if e.opts.Now != nil {
		// A test clock needs the scripted FirstDelivery: take the long way.
		return e.lookupDeliverySlow(ctx, deliveryID, ttl, agentID, jobID)
	}
	if ttl <= 0 {
		ttl = time.Millisecond
	}
	nonce := newNonce()
	s := e.k.shardOf(agentID)
	key := e.k.deliveryOf(s, deliveryID)
	rows := e.k.rows(s, agentID)
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
			card = p.SCard(ctx, e.k.shardStopped(s))
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
		if info.Stopped, err = e.shardInstanceStopped(ctx, s, info.Row.InstanceID); err != nil {
			return relay.DeliveryInfo{}, err
		}
	}
	return info, nil
}

// shardInstanceStopped reads shard s's copy of the stopped set, which
// SetInstanceState writes before the control set.
func (e *queue) shardInstanceStopped(ctx context.Context, s int, instanceID string) (bool, error) {
	var stopped bool
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		stopped, err = e.c.SIsMember(ctx, e.k.shardStopped(s), instanceID).Result()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("redis: instance stopped: %w", err)
	}
	return stopped, nil
}

// lookupDeliverySlow is LookupDelivery as its three separate calls.
func (e *queue) lookupDeliverySlow(ctx context.Context, deliveryID string, ttl time.Duration, agentID, jobID string) (relay.DeliveryInfo, error) {
	var info relay.DeliveryInfo
	if ttl <= 0 {
		ttl = time.Millisecond
	}
	s := e.k.shardOf(agentID)
	v, err := e.run(ctx, scriptFirstDelivery, []string{e.k.deliveryOf(s, deliveryID)}, e.nowArg(), durMs(ttl), newNonce())
	if err != nil {
		return info, fmt.Errorf("redis: lookup delivery: %w", err)
	}
	if first, err := integer(v); err != nil || first != 1 {
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
	if info.Stopped, err = e.shardInstanceStopped(ctx, s, row.InstanceID); err != nil {
		return relay.DeliveryInfo{}, err
	}
	return info, nil
}
